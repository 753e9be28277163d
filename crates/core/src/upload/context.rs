//! The generated Dockerfile and the build context (docs/spec.md §4).

use std::io::{Read, Seek, Write};

use flate2::{Compression, GzBuilder};

use super::archive::CheckedZip;
use super::error::UploadError;
use crate::model::Runtime;
use sless_api::runtime::one_of;

/// The pinned tag of every runtime base image (never `latest`).
pub const BASE_IMAGE_VERSION: &str = "v0.1.0";

/// Root names the build owns: the generated Dockerfile, and the ignore files Docker
/// would apply to the context (BuildKit also reads `<Dockerfile>.dockerignore`).
pub const RESERVED_ROOT_NAMES: [&str; 3] =
    ["Dockerfile", ".dockerignore", "Dockerfile.dockerignore"];

/// The pinned base image of a runtime: `<prefix>/runtime-<runtime>:v0.1.0`.
pub fn base_image(prefix: &str, runtime: Runtime) -> String {
    let prefix = prefix.trim_end_matches('/');
    let name = format!("runtime-{}:{BASE_IMAGE_VERSION}", runtime.as_str());
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    }
}

/// The generated Dockerfile of docs/spec.md §4. The entrypoint CMD is the base image's.
pub fn dockerfile(prefix: &str, runtime: Runtime, entrypoint: &str, paths: &[&str]) -> String {
    let mut lines = vec![
        format!("FROM {}", base_image(prefix, runtime)),
        "WORKDIR /app/function".to_string(),
        // Before COPY/RUN so that build steps (the Go build) see it too.
        format!("ENV SLESS_ENTRYPOINT={}", quote_env(entrypoint)),
        "COPY . /app/function/".to_string(),
    ];
    let descriptor = runtime.descriptor();
    let has_dependencies = paths.contains(&descriptor.dependency_file);
    for step in descriptor
        .image_steps
        .iter()
        .filter(|s| s.applies(has_dependencies))
    {
        lines.push(format!("RUN {}", step.run));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// JSON quoting keeps the value on one line (no instruction injection); `$` is
/// escaped too, since Docker would expand it inside double quotes.
fn quote_env(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_string());
    quoted.replace('$', "\\$")
}

/// The build context as tar.gz, written to `out` (a file, so that it is never held
/// whole in memory; or a `Vec`): the Dockerfile first, then every file with its path and
/// mode, streamed out of the zip one file at a time. Times, owners and the gzip header
/// are fixed, so the same upload always gives the same bytes. Returns `out`.
pub fn build_context<R: Read + Seek, W: Write>(
    prefix: &str,
    runtime: Runtime,
    entrypoint: &str,
    zip: &mut CheckedZip<R>,
    out: W,
) -> Result<W, UploadError> {
    let paths: Vec<&str> = zip.files().iter().map(|f| f.path.as_str()).collect();
    if let Some(path) = paths.iter().find(|p| RESERVED_ROOT_NAMES.contains(p)) {
        return Err(UploadError::unsafe_entry(
            *path,
            format!(
                "{path:?} is reserved at the root of the zip: sless generates the build itself \
                 (dependencies come from {}); remove it or move it into a subfolder",
                one_of(Runtime::ALL.map(|r| r.descriptor().dependency_file))
            ),
        ));
    }
    let dockerfile = dockerfile(prefix, runtime, entrypoint, &paths);
    let gz = GzBuilder::new().mtime(0).write(out, Compression::default());
    let mut tar = tar::Builder::new(gz);
    append(
        &mut tar,
        "Dockerfile",
        dockerfile.len() as u64,
        dockerfile.as_bytes(),
        0o644,
    )?;
    zip.visit(|file, data| append(&mut tar, &file.path, file.size, data, file.mode))?;
    let gz = tar.into_inner().map_err(context_error)?;
    gz.finish().map_err(context_error)
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    size: u64,
    data: impl Read,
    mode: u32,
) -> Result<(), UploadError> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(mode & 0o777);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    // append_data refuses absolute and '..' paths itself, a last line of defence.
    tar.append_data(&mut header, path, data).map_err(|e| {
        UploadError::unsafe_entry(path, format!("cannot be added to the build context: {e}"))
    })
}

fn context_error(e: std::io::Error) -> UploadError {
    UploadError::io("writing the build context failed", e)
}
