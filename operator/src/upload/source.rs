//! The source listing the API and the console show (never the generated Dockerfile).

use super::archive::ArchiveFile;

/// Only this much of a file is scanned for NUL bytes.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// One file of an upload as shown to people.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct SourceFile {
    pub name: String,
    /// None for binary files; cut at `max_file_bytes` when `truncated`.
    pub content: Option<String>,
    pub binary: bool,
    pub truncated: bool,
    /// The full size in bytes, whatever was cut.
    pub size: u64,
}

/// Binary = not valid UTF-8, or a NUL in the first 8 KiB (content None). Longer text
/// is cut at a char boundary at most `max_file_bytes` long, with `truncated` set.
pub fn source_files(files: &[ArchiveFile], max_file_bytes: usize) -> Vec<SourceFile> {
    files
        .iter()
        .map(|file| {
            let size = file.data.len() as u64;
            let head = &file.data[..file.data.len().min(BINARY_SNIFF_BYTES)];
            let text = if head.contains(&0) {
                None
            } else {
                std::str::from_utf8(&file.data).ok()
            };
            let Some(text) = text else {
                return SourceFile {
                    name: file.path.clone(),
                    content: None,
                    binary: true,
                    truncated: false,
                    size,
                };
            };
            let truncated = text.len() > max_file_bytes;
            let mut cut = text.len().min(max_file_bytes);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            SourceFile {
                name: file.path.clone(),
                content: Some(text[..cut].to_string()),
                binary: false,
                truncated,
                size,
            }
        })
        .collect()
}
