//! Upload handling: zip validation, source listing, unpacking and build contexts.
//!
//! `read_zip` is the one gate: every other function here takes its validated
//! `ArchiveFile`s (and still refuses what could escape, as a last line of defence).

mod archive;
mod context;
mod error;
mod keys;
mod source;

pub use archive::{ArchiveFile, read_zip, unpack};
pub use context::{BASE_IMAGE_VERSION, RESERVED_ROOT_NAMES, base_image, build_context, dockerfile};
pub use error::{UploadError, UploadLimits};
pub use keys::{ObjectKeys, object_keys, version_stamp, zip_key_for_context};
pub use source::{SourceFile, source_files};
