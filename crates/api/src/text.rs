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
}
