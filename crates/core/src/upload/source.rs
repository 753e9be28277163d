//! The source listing the API and the console show (never the generated Dockerfile).

use std::io::Read;

use super::archive::CheckedZip;
use super::error::UploadError;

/// Only this much of a file is scanned for NUL bytes.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// One file of an upload as shown to people.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct SourceFile {
    pub name: String,
    /// None for binary files; cut when `truncated`.
    pub content: Option<String>,
    pub binary: bool,
    pub truncated: bool,
    /// The full size in bytes, whatever was cut.
    pub size: u64,
}

/// Caps on one listing: it holds at most `max_total_bytes` of content, whatever the
/// upload expands to.
#[derive(Clone, Copy, Debug)]
pub struct SourceLimits {
    /// Longer text is cut (with `truncated`).
    pub max_file_bytes: usize,
    /// Files past this budget are listed with their size but cut (to nothing at worst).
    pub max_total_bytes: usize,
}

/// The files of an upload, reading at most what is shown of each (plus 8 KiB to sniff).
/// Binary = a NUL in the first 8 KiB, or the bytes read are not valid UTF-8 (content
/// None). Text is cut at a char boundary within the file's share of the limits.
pub fn source_files<R: std::io::Read + std::io::Seek>(
    zip: &mut CheckedZip<R>,
    limits: SourceLimits,
) -> Result<Vec<SourceFile>, UploadError> {
    let mut listing = Vec::with_capacity(zip.files().len());
    let mut budget = limits.max_total_bytes;
    zip.visit(|file, data| {
        let shown = limits.max_file_bytes.min(budget);
        let wanted = shown.max(BINARY_SNIFF_BYTES);
        let mut head = Vec::new();
        data.take(wanted as u64)
            .read_to_end(&mut head)
            .map_err(|e| UploadError::io(format!("reading {:?}", file.path), e))?;
        let entry = describe(&file.path, file.size, &head, shown);
        budget -= entry.content.as_ref().map_or(0, String::len);
        listing.push(entry);
        Ok(())
    })?;
    Ok(listing)
}

/// What to show of a file, given its first bytes and how many of them may be shown.
fn describe(name: &str, size: u64, head: &[u8], shown: usize) -> SourceFile {
    let binary = SourceFile {
        name: name.to_string(),
        content: None,
        binary: true,
        truncated: false,
        size,
    };
    if head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return binary;
    }
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A character split where reading stopped is not a sign of binary data.
        Err(e) if (head.len() as u64) < size && e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return binary,
    };
    let mut cut = text.len().min(shown);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let text = &text[..cut];
    let truncated = size > cut as u64;
    SourceFile {
        name: name.to_string(),
        content: Some(text.to_string()),
        binary: false,
        truncated,
        size,
    }
}
