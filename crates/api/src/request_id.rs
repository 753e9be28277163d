//! The request id of a call: what sless accepts from a caller, and how a runtime tags
//! the lines a call prints with it.

/// A caller's id longer than this, or with other characters than `[A-Za-z0-9._-]`, is
/// replaced (it ends up in logs, records and URLs).
pub const MAX_REQUEST_ID_LEN: usize = 64;

/// The one rule for a request id, on the API, the console, `/fn` and in log tags.
pub fn is_valid_request_id(id: &str) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The call a line of instance output was printed in, and the line without its tag.
/// The runtimes write `[<request id>] ` before each line a call prints and `[-] ` before
/// lines printed outside any call; an untagged line (a child process writing to the
/// descriptor directly) belongs to no call.
pub fn split_call_tag(line: &str) -> (Option<&str>, &str) {
    let Some(rest) = line.strip_prefix('[') else {
        return (None, line);
    };
    let Some((tag, text)) = rest.split_once("] ") else {
        return (None, line);
    };
    match tag {
        "-" => (None, text),
        id if is_valid_request_id(id) => (Some(id), text),
        _ => (None, line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids() {
        assert!(is_valid_request_id("3f9c-a.B_7"));
        assert!(is_valid_request_id(&"a".repeat(MAX_REQUEST_ID_LEN)));
        assert!(!is_valid_request_id(""));
        assert!(!is_valid_request_id(&"a".repeat(MAX_REQUEST_ID_LEN + 1)));
        assert!(!is_valid_request_id("a b"));
        assert!(!is_valid_request_id("id\u{e9}"));
        assert!(!is_valid_request_id("x\"y"));
    }

    #[test]
    fn tags_are_split_off() {
        assert_eq!(split_call_tag("[abc-1] hello"), (Some("abc-1"), "hello"));
        assert_eq!(split_call_tag("[abc] "), (Some("abc"), ""));
        assert_eq!(split_call_tag("[-] loading"), (None, "loading"));
        assert_eq!(split_call_tag("[abc] [def] x"), (Some("abc"), "[def] x"));
        // Not a tag: kept whole.
        assert_eq!(split_call_tag("plain"), (None, "plain"));
        assert_eq!(split_call_tag("[a b] x"), (None, "[a b] x"));
        assert_eq!(split_call_tag("[abc]x"), (None, "[abc]x"));
        assert_eq!(split_call_tag("[] x"), (None, "[] x"));
    }
}
