//! Cutting long messages (build logs, failures) down for people: the server's routes
//! and the clients (CLI, Terraform, console) show them alike.

/// The first line with text in it, trimmed; "" if there is none.
pub fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

/// The last `count` lines with text in them, oldest first.
pub fn last_lines(text: &str, count: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(count)..].to_vec()
}

/// The first line with text, cut to `max_chars` (marked `...`): a result in a table.
pub fn first_line_cut(text: &str, max_chars: usize) -> String {
    let line = first_line(text);
    let mut cut: String = line.chars().take(max_chars).collect();
    if cut.len() < line.len() {
        cut.push_str("...");
    }
    cut
}

/// The lines of a log that say why it failed: the first few naming an error (pip's
/// `ERROR: ...`, npm's `npm error ...`, a `SyntaxError: ...`), each once. A line that
/// one found before already holds is left out: the cause a runner puts first in a
/// status message repeats lines of the log after it.
pub fn error_lines(log: &str) -> Vec<&str> {
    let mut found: Vec<&str> = Vec::new();
    for line in log.lines().map(str::trim).filter(|l| names_an_error(l)) {
        if !found.iter().any(|f| f.contains(line)) {
            found.push(line);
        }
        if found.len() == ERROR_LINES {
            break;
        }
    }
    found
}

/// A log's [`error_lines`] on one line, for the answers and messages that have one.
pub fn error_line(log: &str) -> Option<String> {
    let lines = error_lines(log);
    (!lines.is_empty()).then(|| lines.join("; "))
}

const ERROR_LINES: usize = 3;

/// True for a line naming an error: a word such as `ERROR:`, `error`, `ERR!` or
/// `ModuleNotFoundError:`, not one that only contains it (`pkg/errors`,
/// `NewConnectionError(...)` in a retry warning).
pub fn names_an_error(line: &str) -> bool {
    line.split_whitespace().any(|word| {
        let word = word.trim_end_matches([':', '!', ',']).to_ascii_lowercase();
        word == "err" || word.ends_with("error")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_cut_marks_the_cut() {
        assert_eq!(first_line_cut("abcdef\nmore", 3), "abc...");
        assert_eq!(first_line_cut("abc", 3), "abc");
    }

    #[test]
    fn lines_with_text() {
        assert_eq!(
            first_line("\n  \n  boom: no module\nmore"),
            "boom: no module"
        );
        assert_eq!(first_line(" \n"), "");
        assert_eq!(last_lines("a\n\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(last_lines("a\n", 5), ["a"]);
    }

    #[test]
    fn the_error_lines_are_the_first_ones_naming_an_error() {
        let log = "step 1\nERROR: no matching distribution\nstep 2 done\n";
        assert_eq!(error_lines(log), ["ERROR: no matching distribution"]);
        let npm =
            "$ npm install\nnpm error code E\nnpm error parse\nnpm error bad\nnpm error log\n";
        assert_eq!(
            error_line(npm).unwrap(),
            "npm error code E; npm error parse; npm error bad"
        );
        assert_eq!(
            error_line("all good\ngo: downloading github.com/pkg/errors"),
            None
        );
        let retry = "WARNING: Retrying after NewConnectionError('<conn>: Failed')";
        assert!(error_lines(retry).is_empty());
        assert!(names_an_error("SyntaxError: invalid syntax"));
        assert!(names_an_error("npm ERR! code E404"));
    }

    #[test]
    fn a_cause_put_before_its_log_is_said_once() {
        let message = "ERROR: a; ERROR: b\n[10:00:00] $ pip install\nERROR: a\nERROR: b\n";
        assert_eq!(error_lines(message), ["ERROR: a; ERROR: b"]);
    }
}
