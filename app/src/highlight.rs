//! Server-side syntax highlighting with syntect: CSS classes (no inline styles, so the
//! Content-Security-Policy needs no `unsafe-inline`), a light and a dark theme, and
//! hard caps applied before highlighting because syntect is slow on pathological input.

use std::sync::LazyLock;

use sless_api::SourceFileResponse;
use syntect::highlighting::ThemeSet;
use syntect::html::{ClassStyle, ClassedHTMLGenerator, css_for_theme_with_class_style};
use syntect::parsing::{SyntaxReference, SyntaxSet};

/// Every class syntect emits starts with this, so the themes cannot clash with the
/// console's own class names.
pub const CLASS_STYLE: ClassStyle = ClassStyle::SpacedPrefixed { prefix: "hl-" };
/// The class syntect's theme CSS puts the base colours on.
pub const CODE_CLASS: &str = "hl-code";

/// More than this is not highlighted (a notice says so).
pub const MAX_BYTES: usize = 512 * 1024;
/// Longer lines are cut: a regex engine on one 100,000-character line can take minutes.
pub const MAX_LINE_CHARS: usize = 5_000;
/// Bounds the work of many tiny lines.
pub const MAX_LINES: usize = 20_000;

const LIGHT_THEME: &str = "InspiredGitHub";
const DARK_THEME: &str = "base16-ocean.dark";

static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// Loads the syntax definitions now rather than on the first source view.
pub fn warm_up() {
    LazyLock::force(&SYNTAXES);
}

/// The stylesheet for highlighted code: the light theme unless the reader prefers dark.
/// Generated once; served as `/style/highlight.css`.
pub fn theme_css() -> &'static str {
    static CSS: LazyLock<String> = LazyLock::new(|| {
        let themes = ThemeSet::load_defaults();
        let css = |name: &str| {
            themes
                .themes
                .get(name)
                .and_then(|theme| css_for_theme_with_class_style(theme, CLASS_STYLE).ok())
                .unwrap_or_default()
        };
        // The themes' comment colours are too faint for WCAG AA on their backgrounds.
        format!(
            "@media not (prefers-color-scheme: dark) {{\n{}\n.hl-code .hl-comment {{ color: #5f6b76; }}\n}}\n\
             @media (prefers-color-scheme: dark) {{\n{}\n.hl-code .hl-comment {{ color: #a0a9b4; }}\n}}\n",
            css(LIGHT_THEME),
            css(DARK_THEME)
        )
    });
    &CSS
}

/// One file ready to show.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedFile {
    pub name: String,
    /// The full size of the uploaded file, in bytes.
    pub size: u64,
    pub body: FileBody,
    /// Human-readable notes about what was cut.
    pub notices: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FileBody {
    Binary,
    Empty,
    Code {
        /// syntect's HTML: the code is escaped, tags are only `<span class="hl-...">`.
        /// Shared: every page showing the file points at the cached copy.
        html: std::sync::Arc<str>,
        /// `1\n2\n...`: the line-number gutter.
        gutter: String,
        lines: usize,
        syntax: String,
    },
}

impl RenderedFile {
    /// Bytes held, for the cache's size cap.
    pub fn weight(&self) -> usize {
        let body = match &self.body {
            FileBody::Code { html, gutter, .. } => html.len() + gutter.len(),
            _ => 0,
        };
        body + self.name.len() + self.notices.iter().map(String::len).sum::<usize>() + 64
    }
}

/// The syntax by file extension (or whole file name, e.g. `Makefile`), then by the
/// first line (a shebang), else plain text.
fn syntax_for(name: &str, first_line: &str) -> &'static SyntaxReference {
    let file_name = name.rsplit('/').next().unwrap_or(name);
    let extension = file_name.rsplit_once('.').map(|(_, ext)| ext);
    extension
        .and_then(|ext| SYNTAXES.find_syntax_by_extension(ext))
        .or_else(|| SYNTAXES.find_syntax_by_extension(file_name))
        .or_else(|| SYNTAXES.find_syntax_by_first_line(first_line))
        .unwrap_or_else(|| SYNTAXES.find_syntax_plain_text())
}

/// What survives the caps, and notes about what did not.
struct Capped {
    text: String,
    notices: Vec<String>,
}

fn cap(content: &str, size: u64, cut_by_api: bool) -> Capped {
    let mut notices = Vec::new();
    let mut head = content;
    if head.len() > MAX_BYTES {
        let mut end = MAX_BYTES;
        while !head.is_char_boundary(end) {
            end -= 1;
        }
        // End on a line boundary when there is one, so no half line is highlighted.
        if let Some(newline) = head[..end].rfind('\n') {
            end = newline + 1;
        }
        head = &head[..end];
    }
    if head.len() < content.len() || cut_by_api {
        notices.push(format!(
            "Truncated: showing the first {} of {}.",
            sless_api::human_bytes(head.len() as u64),
            sless_api::human_bytes(size)
        ));
    }
    let mut text = String::with_capacity(head.len() + 1);
    let mut long_lines = 0usize;
    for (index, line) in head.split_inclusive('\n').enumerate() {
        if index == MAX_LINES {
            notices.push(format!("Truncated: showing the first {MAX_LINES} lines."));
            break;
        }
        let body = line.strip_suffix('\n').unwrap_or(line);
        match body.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => {
                long_lines += 1;
                text.push_str(&body[..cut]);
                text.push_str(" …\n");
            }
            None => {
                text.push_str(body);
                text.push('\n');
            }
        }
    }
    if long_lines > 0 {
        let what = if long_lines == 1 {
            "line is"
        } else {
            "lines are"
        };
        notices.push(format!(
            "{long_lines} {what} longer than {MAX_LINE_CHARS} characters and cut (marked …)."
        ));
    }
    Capped { text, notices }
}

/// Highlights one file of the source listing. CPU-bound: call it off the async runtime.
pub fn render_file(file: &SourceFileResponse) -> RenderedFile {
    let base = |body, notices| RenderedFile {
        name: file.name.clone(),
        size: file.size,
        body,
        notices,
    };
    let content = match &file.content {
        Some(content) if !file.binary => content,
        _ => return base(FileBody::Binary, Vec::new()),
    };
    if content.is_empty() && file.size == 0 {
        return base(FileBody::Empty, Vec::new());
    }
    let Capped { text, notices } = cap(content, file.size, file.truncated);
    let first_line = text.lines().next().unwrap_or("");
    let syntax = syntax_for(&file.name, first_line);
    let (html, lines) = highlight(&text, syntax);
    let mut gutter = String::with_capacity(lines * 6);
    for n in 1..=lines {
        gutter.push_str(&n.to_string());
        gutter.push('\n');
    }
    base(
        FileBody::Code {
            html: html.into(),
            gutter,
            lines,
            syntax: syntax.name.clone(),
        },
        notices,
    )
}

/// syntect's classed HTML of `text` (every line ends with `\n`) and its line count.
fn highlight(text: &str, syntax: &SyntaxReference) -> (String, usize) {
    let mut generator = ClassedHTMLGenerator::new_with_class_style(syntax, &SYNTAXES, CLASS_STYLE);
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        lines += 1;
        if generator
            .parse_html_for_line_which_includes_newline(line)
            .is_err()
        {
            // A syntax definition that fails mid-file: show the file as plain text.
            return (plain(text), text.split_inclusive('\n').count());
        }
    }
    (generator.finalize(), lines)
}

/// Escaped text without highlighting (element content: `&`, `<`, `>`).
fn plain(text: &str) -> String {
    html_escape::encode_text(text).into_owned()
}

/// JSON texts above this are shown plain: they are highlighted while the page renders.
pub const JSON_HIGHLIGHT_LIMIT: usize = 16 * 1024;

/// A JSON text (a response body, a job's result) highlighted, pretty-printed when it
/// parses; `name` is the caption shown above it. None when it is not JSON or too long
/// to highlight while a page renders ([`JSON_HIGHLIGHT_LIMIT`]).
pub fn render_json_text(name: &str, text: &str) -> Option<RenderedFile> {
    if text.len() > JSON_HIGHLIGHT_LIMIT {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let content = serde_json::to_string_pretty(&value).ok()?;
    Some(render_file(&SourceFileResponse {
        name: format!("{name}.json"),
        size: content.len() as u64,
        content: Some(content),
        binary: false,
        truncated: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn file(name: &str, content: &str) -> SourceFileResponse {
        SourceFileResponse {
            name: name.into(),
            content: Some(content.into()),
            binary: false,
            truncated: false,
            size: content.len() as u64,
        }
    }

    fn code(rendered: &RenderedFile) -> (&str, usize) {
        match &rendered.body {
            FileBody::Code { html, lines, .. } => (&**html, *lines),
            other => panic!("not code: {other:?}"),
        }
    }

    #[test]
    fn python_gets_classes_and_escaping() {
        let rendered = render_file(&file(
            "<img src=x onerror=alert(1)>.py",
            "def f():\n    return '</script><script>alert(2)</script>'\n",
        ));
        let (html, lines) = code(&rendered);
        assert_eq!(lines, 2);
        assert!(html.contains("<span class=\"hl-"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;/script&gt;"), "{html}");
        assert!(!html.contains("style="));
        if let FileBody::Code { syntax, gutter, .. } = &rendered.body {
            assert_eq!(syntax, "Python");
            assert_eq!(gutter, "1\n2\n");
        }
    }

    #[test]
    fn unknown_extensions_are_plain_text_and_shebangs_count() {
        let rendered = render_file(&file("notes.weird", "a < b\n"));
        let (html, _) = code(&rendered);
        assert!(html.contains("a &lt; b"), "{html}");
        let script = render_file(&file("run", "#!/bin/sh\necho hi\n"));
        if let FileBody::Code { syntax, .. } = &script.body {
            assert!(
                syntax.contains("Bash") || syntax.contains("Shell"),
                "{syntax}"
            );
        }
    }

    #[test]
    fn binary_and_empty_files() {
        let mut binary = file("logo.png", "");
        binary.content = None;
        binary.binary = true;
        binary.size = 10;
        assert_eq!(render_file(&binary).body, FileBody::Binary);
        assert_eq!(render_file(&file("empty.py", "")).body, FileBody::Empty);
    }

    #[test]
    fn huge_input_is_capped_before_highlighting() {
        let long_line = format!("x = '{}'\n", "a".repeat(100_000));
        let started = Instant::now();
        let rendered = render_file(&file("long.py", &long_line));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            rendered
                .notices
                .iter()
                .any(|n| n.contains("longer than 5000"))
        );
        let (html, _) = code(&rendered);
        assert!(html.len() < 60_000);

        let big = "y = 1\n".repeat(900_000);
        let mut response = file("big.py", &big);
        response.size = 5 * 1024 * 1024;
        response.truncated = true;
        let rendered = render_file(&response);
        assert!(
            rendered.notices.iter().any(|n| n.contains("Truncated")),
            "{:?}",
            rendered.notices
        );
        let (_, lines) = code(&rendered);
        assert!(lines <= MAX_LINES);
    }

    #[test]
    fn theme_css_has_both_schemes_and_no_unprefixed_classes() {
        let css = theme_css();
        assert!(css.contains("prefers-color-scheme: dark"));
        assert!(css.contains(".hl-code"));
        assert!(css.contains(".hl-keyword"));
    }
}
