//! Upload handling: zip validation, source listing, unpacking and build contexts.
//!
//! `check_zip` is the one gate: every other function here reads the files of its
//! `CheckedZip` one at a time (and still refuses what could escape, as a last line of
//! defence), so memory stays bounded whatever an upload expands to.

mod archive;
mod context;
mod error;
mod source;

pub use archive::{ArchiveEntry, CheckedZip, check_zip, unpack};
pub use context::{BASE_IMAGE_VERSION, RESERVED_ROOT_NAMES, base_image, build_context, dockerfile};
pub use error::{UploadError, UploadLimits};
// The key format lives in sless-api: the CLI reads versions of keys too.
pub use sless_api::keys::{
    ObjectKeys, job_key_name, object_keys, review_note_key, upload_prefixes, version_of,
    version_stamp, zip_key_for_context,
};
pub use source::{SourceFile, SourceLimits, source_files};
