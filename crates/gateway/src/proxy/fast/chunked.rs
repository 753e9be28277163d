//! The chunked framing of a function's answer, followed as it passes through unchanged,
//! to find where the answer ends.

/// A chunk-size line of a chunked answer, extensions included.
pub(super) const MAX_CHUNK_LINE: usize = 4096;
/// Trailers of a chunked answer, all together.
const MAX_TRAILERS: usize = 16 * 1024;

/// Follows a chunked body as it passes through, to find where it ends.
#[derive(Debug, Default)]
pub(super) struct ChunkedScan {
    state: ChunkState,
    trailer_bytes: usize,
}

#[derive(Debug, Default, PartialEq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

impl ChunkedScan {
    /// How many bytes of `bytes` belong to the body (whole framing elements only);
    /// None when the framing is broken.
    pub(super) fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        self.scan_data(bytes, |_| {})
    }

    /// As [`ChunkedScan::scan`], giving `data` the chunks' data as it passes.
    pub(super) fn scan_data(&mut self, bytes: &[u8], mut data: impl FnMut(&[u8])) -> Option<usize> {
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            match self.state {
                ChunkState::Done => return Some(at),
                ChunkState::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((len, 0))) => {
                        at += len;
                        self.state = ChunkState::Trailers;
                    }
                    Ok(httparse::Status::Complete((len, size))) => {
                        at += len;
                        self.state = ChunkState::Data(size);
                    }
                    Ok(httparse::Status::Partial) if rest.len() < MAX_CHUNK_LINE => {
                        return Some(at);
                    }
                    _ => return None,
                },
                ChunkState::Data(size) => {
                    if rest.is_empty() {
                        return Some(at);
                    }
                    let take = usize::try_from(size).unwrap_or(usize::MAX).min(rest.len());
                    data(&rest[..take]);
                    at += take;
                    let left = size - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        return Some(at);
                    }
                    if &rest[..2] != b"\r\n" {
                        return None;
                    }
                    at += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        return (self.trailer_bytes + rest.len() < MAX_TRAILERS).then_some(at);
                    };
                    at += end + 2;
                    self.trailer_bytes += end + 2;
                    if end == 0 {
                        self.state = ChunkState::Done;
                    } else if self.trailer_bytes > MAX_TRAILERS {
                        return None;
                    }
                }
            }
        }
    }

    pub(super) fn done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_end_where_their_framing_says_in_any_split() {
        let body = b"5;ext=1\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n";
        let mut next = body.to_vec();
        next.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        for split in 0..body.len() {
            let mut scan = ChunkedScan::default();
            let mut data = Vec::new();
            let first = scan
                .scan_data(&next[..split], |d| data.extend_from_slice(d))
                .unwrap();
            let mut at = first;
            while !scan.done() {
                let taken = scan
                    .scan_data(&next[at..], |d| data.extend_from_slice(d))
                    .unwrap();
                assert!(taken > 0 || at < body.len(), "stuck at {at}");
                at += taken;
            }
            assert_eq!(at, body.len(), "split at {split}");
            assert_eq!(data, b"hello", "split at {split}");
        }
        for broken in [&b"zz\r\n"[..], b"5\r\nhelloXX", b"ffffffffffffffffffff\r\n"] {
            let mut scan = ChunkedScan::default();
            assert_eq!(
                scan.scan(broken),
                None,
                "{:?}",
                String::from_utf8_lossy(broken)
            );
        }
        let mut scan = ChunkedScan::default();
        let endless_trailers =
            [&b"0\r\n"[..], &b"X-A: 1\r\n".repeat(MAX_TRAILERS / 8 + 1)].concat();
        assert_eq!(scan.scan(&endless_trailers), None);
    }
}
