//! Every call's request id and W3C trace context, made once per call and written on both
//! header paths. A caller's valid `X-Request-Id` is kept, otherwise one is made; the
//! caller's `traceparent` is continued (its trace id and flags, a new parent id: this
//! hop's span) or a trace is started. The function gets both; the caller gets the
//! request id back. Nothing here allocates.

use axum::http::HeaderName;

pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

use crate::request_id::{self, MAX_LEN as MAX_REQUEST_ID};
/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`.
const TRACEPARENT_LEN: usize = 55;

/// One call's ids, written as header values.
#[derive(Clone, Copy)]
pub(crate) struct CallIds {
    request_id: [u8; MAX_REQUEST_ID],
    request_id_len: u8,
    traceparent: [u8; TRACEPARENT_LEN],
    trace: TraceIds,
}

/// Where a call sits in its W3C trace, for the spans exported of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceIds {
    pub trace_id: [u8; 16],
    /// The span of the call to the function: the parent id the function was given.
    pub call_span_id: [u8; 8],
    /// The caller's span, when it sent a valid `traceparent`.
    pub caller_span_id: Option<[u8; 8]>,
    /// The caller asked for the trace to be recorded (or sless started it).
    pub sampled: bool,
}

impl CallIds {
    /// The ids of a call from what its caller sent (the first of each header).
    pub(crate) fn new(request_id: Option<&[u8]>, traceparent: Option<&[u8]>) -> Self {
        let mut ids = Self {
            request_id: [0; MAX_REQUEST_ID],
            request_id_len: 0,
            traceparent: [0; TRACEPARENT_LEN],
            trace: TraceIds {
                trace_id: [0; 16],
                call_span_id: [0; 8],
                caller_span_id: None,
                sampled: false,
            },
        };
        match request_id.filter(|id| is_valid_request_id(id)) {
            Some(id) => {
                ids.request_id[..id.len()].copy_from_slice(id);
                ids.request_id_len = id.len() as u8;
            }
            None => {
                hex(
                    &rand::random::<u128>().to_be_bytes(),
                    &mut ids.request_id[..32],
                );
                ids.request_id_len = 32;
            }
        }
        let caller = traceparent.and_then(parse_traceparent);
        let (trace_id, flags) = caller.map_or_else(
            || (rand::random::<u128>().max(1).to_be_bytes(), 1),
            |(trace_id, _, flags)| (trace_id, flags),
        );
        let span_id = rand::random::<u64>().max(1).to_be_bytes();
        ids.trace = TraceIds {
            trace_id,
            call_span_id: span_id,
            caller_span_id: caller.map(|(_, parent_id, _)| parent_id),
            sampled: flags & 1 == 1,
        };
        let out = &mut ids.traceparent;
        out[..3].copy_from_slice(b"00-");
        hex(&trace_id, &mut out[3..35]);
        out[35] = b'-';
        hex(&span_id, &mut out[36..52]);
        out[52] = b'-';
        hex(&[flags], &mut out[53..55]);
        ids
    }

    pub(crate) fn request_id(&self) -> &[u8] {
        &self.request_id[..usize::from(self.request_id_len)]
    }

    pub(crate) fn traceparent(&self) -> &[u8] {
        &self.traceparent
    }

    pub(crate) fn trace(&self) -> TraceIds {
        self.trace
    }
}

/// A caller's id sless keeps ([`request_id::is_valid`]).
fn is_valid_request_id(id: &[u8]) -> bool {
    std::str::from_utf8(id).is_ok_and(request_id::is_valid)
}

/// The trace id, parent id and flags of a valid version-00 `traceparent` (a later
/// version's first 55 characters are read the same way, as the W3C spec asks); None for
/// anything else.
fn parse_traceparent(value: &[u8]) -> Option<([u8; 16], [u8; 8], u8)> {
    let value = value.trim_ascii();
    if value.len() < TRACEPARENT_LEN
        || (value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-')
    {
        return None;
    }
    let version = unhex::<1>(&value[..2])?[0];
    if version == 0xff || (version == 0 && value.len() != TRACEPARENT_LEN) {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = unhex::<16>(&value[3..35])?;
    let parent_id = unhex::<8>(&value[36..52])?;
    let flags = unhex::<1>(&value[53..55])?[0];
    (trace_id != [0; 16] && parent_id != [0; 8]).then_some((trace_id, parent_id, flags))
}

pub(crate) fn hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// Lowercase hex only, as the W3C spec requires.
fn unhex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_valid_request_id_is_kept_and_anything_else_replaced() {
        let kept = CallIds::new(Some(b"order-42_retry.1"), None);
        assert_eq!(kept.request_id(), b"order-42_retry.1");
        let long = [b'a'; MAX_REQUEST_ID + 1];
        for bad in [&b""[..], b"has space", b"new\nline", b"caf\xc3\xa9", &long] {
            let made = CallIds::new(Some(bad), None);
            assert_eq!(made.request_id().len(), 32, "{bad:?}");
            assert!(made.request_id().iter().all(u8::is_ascii_hexdigit));
        }
        let a = CallIds::new(None, None);
        let b = CallIds::new(None, None);
        assert_ne!(a.request_id(), b.request_id(), "made ids differ");
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_a_new_parent() {
        let given = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ids = CallIds::new(None, Some(given));
        let ours = text(ids.traceparent());
        assert!(
            ours.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{ours}"
        );
        assert!(ours.ends_with("-01"), "{ours}");
        assert_ne!(&ours[36..52], "00f067aa0ba902b7", "a span of our own");
        // A later version: its first fields are read the same way.
        let later = b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes-next";
        let ours = CallIds::new(None, Some(later));
        assert!(text(ours.traceparent()).starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
    }

    #[test]
    fn an_invalid_traceparent_starts_a_new_trace() {
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"garbage",
        ] {
            let ours = CallIds::new(None, Some(bad));
            let text = text(ours.traceparent());
            assert!(
                !text.contains("4bf92f3577b34da6"),
                "{bad:?} continued: {text}"
            );
            assert!(parse_traceparent(ours.traceparent()).is_some(), "{text}");
            assert!(text.ends_with("-01"), "a started trace is sampled: {text}");
        }
    }
}
