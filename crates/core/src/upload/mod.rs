//! Upload handling: zip validation, source listing, unpacking and build contexts.
//!
//! `check_zip` is the one gate: every other function here reads the files of its
//! `CheckedZip` one at a time (and still refuses what could escape, as a last line of
//! defence), so memory stays bounded whatever an upload expands to.

mod archive;
mod context;
mod error;
mod keys;
mod source;

pub use archive::{ArchiveEntry, CheckedZip, check_zip, unpack};
pub use context::{BASE_IMAGE_VERSION, RESERVED_ROOT_NAMES, base_image, build_context, dockerfile};
pub use error::{UploadError, UploadLimits};
pub use keys::{ObjectKeys, object_keys, version_stamp, zip_key_for_context};
pub use source::{SourceFile, SourceLimits, source_files};
