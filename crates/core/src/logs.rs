//! Captured output of function instances: a bounded ring per workload, so the logs
//! endpoint and the console can show what a handler printed.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::broadcast;

pub use sless_api::LogFilter;
use sless_api::split_call_tag;

use crate::model::Kind;

/// Where the API reads captured output and build logs; each platform provides it.
#[async_trait::async_trait]
pub trait WorkloadLogs: Send + Sync + 'static {
    /// The last `query.tail` lines of a workload's output that `query` keeps, oldest
    /// first.
    fn lines(&self, namespace: &str, name: &str, query: &LogFilter) -> Vec<LogLine>;
    /// The lines `lines` gives and every later line as it is printed; None when this
    /// platform keeps no output to follow.
    fn follow(&self, namespace: &str, name: &str, query: &LogFilter) -> Option<Following>;
    /// The whole log of the latest build, if there was one.
    async fn build_log(&self, kind: Kind, namespace: &str, name: &str) -> Option<String>;
}

/// What a follower reads: the lines there were, then new ones as they come. A follower
/// too slow for the lines printed is told how many it missed ([`RecvError::Lagged`]).
///
/// [`RecvError::Lagged`]: tokio::sync::broadcast::error::RecvError::Lagged
pub struct Following {
    pub lines: Vec<LogLine>,
    pub new: broadcast::Receiver<LogLine>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// RFC 3339 with milliseconds.
    pub time: String,
    pub stream: Stream,
    /// Which upload the printing instance runs (its version stamp).
    pub version: String,
    /// The call that printed the line; None for lines printed outside any call and for
    /// sless's own lines.
    pub request_id: Option<String>,
    pub line: String,
}

impl LogLine {
    pub fn kept_by(&self, filter: &LogFilter) -> bool {
        filter.keeps(self.request_id.as_deref(), &self.line)
    }
}

/// The last `max` bytes of a log for a status or an event, cut at a line start and
/// marked with `...` when something was left out.
pub fn last_bytes(text: &str, max: usize) -> String {
    let text = text.trim_end();
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    let cut = cut.find('\n').map_or(cut, |i| &cut[i + 1..]);
    format!("...\n{cut}")
}

/// The first `max` bytes of a text for a record, cut at a character boundary and
/// marked with `...` when something was left out.
pub fn first_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Lines longer than this are cut (the mark included): one runaway print must not eat
/// the ring, nor memory while it is read.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

const CUT_MARK: &str = " [line truncated]";

/// The line as text, cut at a char boundary so that with the mark it fits in `max` bytes.
fn cut_line(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut keep = &bytes[..max.saturating_sub(CUT_MARK.len())];
    if let Err(e) = std::str::from_utf8(keep)
        && e.error_len().is_none()
    {
        keep = &keep[..e.valid_up_to()];
    }
    let mut line = String::from_utf8_lossy(keep).into_owned();
    line.push_str(CUT_MARK);
    line
}

/// Calls `line` for each line of `reader` (without its end), cutting a line longer than
/// `max` bytes and skipping its rest: a writer that never prints a newline makes this
/// hold at most `max` bytes, not the whole stream.
pub async fn read_lines(reader: impl AsyncRead + Unpin, max: usize, mut line: impl FnMut(String)) {
    let mut reader = BufReader::new(reader);
    let mut current = Vec::new();
    // The current line was already cut and handed out; its rest is dropped.
    let mut skipping = false;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (used, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !skipping {
            let text = &chunk[..if ends { used - 1 } else { used }];
            // One byte past the limit is enough to know the line must be cut.
            let room = (max + 1).saturating_sub(current.len());
            current.extend_from_slice(&text[..text.len().min(room)]);
            if current.len() > max {
                line(cut_line(&current, max));
                current.clear();
                skipping = !ends;
            } else if ends {
                let text = current.strip_suffix(b"\r").unwrap_or(&current);
                line(String::from_utf8_lossy(text).into_owned());
                current.clear();
            }
        } else if ends {
            skipping = false;
        }
        reader.consume(used);
    }
    if !current.is_empty() {
        line(cut_line(&current, max));
    }
}

/// Lines a follower may fall behind by before it is told it missed some.
const FOLLOW_BACKLOG: usize = 1024;

#[derive(Default)]
struct Ring {
    lines: VecDeque<LogLine>,
    /// Made when somebody first follows this workload.
    followers: Option<broadcast::Sender<LogLine>>,
}

pub struct LogBook {
    capacity: usize,
    rings: Mutex<HashMap<(String, String), Ring>>,
}

impl LogBook {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            rings: Mutex::new(HashMap::new()),
        }
    }

    /// A line of sless's own about a workload (not printed by a call).
    pub fn push(&self, namespace: &str, name: &str, stream: Stream, version: &str, line: &str) {
        self.keep(namespace, name, stream, version, None, line);
    }

    /// A line an instance printed, with its runtime's call tag ([`split_call_tag`]).
    pub fn push_output(
        &self,
        namespace: &str,
        name: &str,
        stream: Stream,
        version: &str,
        line: &str,
    ) {
        let (request_id, text) = split_call_tag(line);
        self.keep(namespace, name, stream, version, request_id, text);
    }

    fn keep(
        &self,
        namespace: &str,
        name: &str,
        stream: Stream,
        version: &str,
        request_id: Option<&str>,
        line: &str,
    ) {
        let line = cut_line(
            line.trim_end_matches(['\r', '\n']).as_bytes(),
            MAX_LINE_BYTES,
        );
        let entry = LogLine {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            stream,
            version: version.to_string(),
            request_id: request_id.map(str::to_string),
            line,
        };
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let ring = rings
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        if let Some(followers) = &ring.followers
            && followers.receiver_count() > 0
        {
            // Fails only when the last follower left in between.
            let _ = followers.send(entry.clone());
        }
        if ring.lines.len() == self.capacity {
            ring.lines.pop_front();
        }
        ring.lines.push_back(entry);
    }

    /// The last `query.tail` lines `query` keeps, oldest first.
    pub fn lines(&self, namespace: &str, name: &str, query: &LogFilter) -> Vec<LogLine> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings
            .get(&(namespace.to_string(), name.to_string()))
            .map(|ring| matching(&ring.lines, query))
            .unwrap_or_default()
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, namespace: &str, name: &str, n: usize) -> Vec<LogLine> {
        self.lines(namespace, name, &LogFilter::tail(n))
    }

    /// The lines `query` keeps and a receiver of every later line (unfiltered), taken
    /// together so that no line is missed or seen twice.
    pub fn follow(&self, namespace: &str, name: &str, query: &LogFilter) -> Following {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let ring = rings
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        let new = ring
            .followers
            .get_or_insert_with(|| broadcast::channel(FOLLOW_BACKLOG).0)
            .subscribe();
        Following {
            lines: matching(&ring.lines, query),
            new,
        }
    }

    /// Forgets a workload's lines; its followers' streams end.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings.remove(&(namespace.to_string(), name.to_string()));
    }
}

/// The last `query.tail` lines of `ring` that `query` keeps, oldest first.
fn matching(ring: &VecDeque<LogLine>, query: &LogFilter) -> Vec<LogLine> {
    let mut lines: Vec<LogLine> = ring
        .iter()
        .rev()
        .filter(|line| line.kept_by(query))
        .take(query.tail)
        .cloned()
        .collect();
    lines.reverse();
    lines
}

/// Output only, no builds: for an API that runs no workloads itself.
#[async_trait::async_trait]
impl WorkloadLogs for LogBook {
    fn lines(&self, namespace: &str, name: &str, query: &LogFilter) -> Vec<LogLine> {
        LogBook::lines(self, namespace, name, query)
    }

    fn follow(&self, namespace: &str, name: &str, query: &LogFilter) -> Option<Following> {
        Some(LogBook::follow(self, namespace, name, query))
    }

    async fn build_log(&self, _kind: Kind, _namespace: &str, _name: &str) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_end_at_a_character() {
        assert_eq!(first_bytes("short", 10), "short");
        assert_eq!(first_bytes("abcdef", 3), "abc...");
        assert_eq!(first_bytes("aé", 2), "a...");
    }

    #[test]
    fn last_bytes_start_at_a_line() {
        let long: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let cut = last_bytes(&long, 2000);
        assert!(cut.starts_with("...\nline "));
        assert!(cut.ends_with("line 999"));
        assert!(cut.len() <= 2000 + 4);
        assert_eq!(last_bytes("short\n", 2000), "short");
        assert_eq!(last_bytes("é\né\n", 3), "...\né");
    }

    #[test]
    fn ring_keeps_the_newest_lines() {
        let book = LogBook::new(3);
        for i in 0..5 {
            book.push("ns", "f", Stream::Stdout, "v1", &format!("line {i}\n"));
        }
        let lines: Vec<_> = book
            .tail("ns", "f", 10)
            .into_iter()
            .map(|l| l.line)
            .collect();
        assert_eq!(lines, ["line 2", "line 3", "line 4"]);
        let last: Vec<_> = book
            .tail("ns", "f", 1)
            .into_iter()
            .map(|l| l.line)
            .collect();
        assert_eq!(last, ["line 4"]);
        assert!(book.tail("ns", "other", 10).is_empty());
    }

    #[test]
    fn output_lines_are_told_apart_by_call() {
        let book = LogBook::new(10);
        book.push_output("ns", "f", Stream::Stdout, "v1", "[-] loading");
        book.push_output("ns", "f", Stream::Stdout, "v1", "[call-1] Hello from one");
        book.push_output("ns", "f", Stream::Stderr, "v1", "[call-2] hello from two");
        book.push_output("ns", "f", Stream::Stdout, "v1", "[call-1] bye");
        book.push("ns", "f", Stream::Stderr, "-", "[sless] restarting");
        let one = book.lines(
            "ns",
            "f",
            &LogFilter {
                tail: 10,
                request_id: Some("call-1".into()),
                search: None,
            },
        );
        let texts: Vec<_> = one.iter().map(|l| l.line.as_str()).collect();
        assert_eq!(texts, ["Hello from one", "bye"]);
        let all = book.tail("ns", "f", 10);
        assert_eq!(all[0].request_id, None);
        assert_eq!(all[0].line, "loading");
        assert_eq!(
            all[4].request_id, None,
            "sless's own lines are never a call's"
        );
        assert_eq!(all[4].line, "[sless] restarting");
        let found = book.lines(
            "ns",
            "f",
            &LogFilter {
                tail: 1,
                request_id: None,
                search: Some("HELLO".into()),
            },
        );
        assert_eq!(found.len(), 1, "tail applies after the search");
        assert_eq!(found[0].line, "hello from two");
    }

    #[tokio::test]
    async fn followers_get_the_lines_then_each_new_one_once() {
        let book = LogBook::new(10);
        book.push("ns", "f", Stream::Stdout, "v1", "before");
        let mut following = book.follow("ns", "f", &LogFilter::tail(5));
        assert_eq!(following.lines.len(), 1);
        book.push("ns", "f", Stream::Stdout, "v1", "after");
        assert_eq!(following.new.recv().await.unwrap().line, "after");
        book.forget("ns", "f");
        assert!(
            following.new.recv().await.is_err(),
            "forgetting ends the stream"
        );
    }

    #[test]
    fn long_lines_are_cut() {
        let book = LogBook::new(3);
        book.push("ns", "f", Stream::Stderr, "v1", &"é".repeat(10_000));
        let line = &book.tail("ns", "f", 1)[0].line;
        assert!(line.len() <= MAX_LINE_BYTES);
        assert!(line.ends_with("[line truncated]"));
    }

    /// An endless stream with no newline, produced on demand.
    struct Endless(usize);

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = buf.remaining().min(self.0);
            buf.put_slice(&vec![b'x'; n]);
            self.0 -= n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn reading_cuts_lines_at_the_limit() {
        let mut lines = Vec::new();
        let input = format!("short\r\n{}\nnext\n{}", "é".repeat(20_000), "y".repeat(5));
        read_lines(input.as_bytes(), MAX_LINE_BYTES, |l| lines.push(l)).await;
        assert_eq!(
            lines.len(),
            4,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(lines[0], "short");
        assert!(lines[1].len() <= MAX_LINE_BYTES && lines[1].len() > MAX_LINE_BYTES - 64);
        assert!(lines[1].starts_with("éé") && lines[1].ends_with(CUT_MARK));
        assert_eq!(lines[2], "next", "the rest of the cut line is skipped");
        assert_eq!(lines[3], "yyyyy", "the last line needs no newline");

        // 256 MiB without a newline: one cut line, never the whole stream in memory.
        let mut lines = Vec::new();
        read_lines(Endless(256 << 20), MAX_LINE_BYTES, |l| lines.push(l)).await;
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), MAX_LINE_BYTES);
        assert!(lines[0].ends_with(CUT_MARK));
    }
}
