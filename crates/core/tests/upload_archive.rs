//! Upload pipeline: zip validation (including hand-crafted malicious zips), source
//! listing, unpacking, the generated Dockerfile and build contexts (object keys: sless-api).

use std::io::{Cursor, Read, Write};

use flate2::read::GzDecoder;
use sless_core::model::Runtime;
use sless_core::upload::*;
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

const MIB: usize = 1024 * 1024;

// ---------- helpers ----------

fn opts() -> SimpleFileOptions {
    SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
}

/// A zip of regular files (mode 0o644).
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        zip.start_file(*name, opts()).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A file of an upload, inflated whole (these zips are small).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ArchiveFile {
    path: String,
    data: Vec<u8>,
    mode: u32,
}

/// Checks a zip and inflates every file.
fn read_zip(zip: &[u8], limits: &UploadLimits) -> Result<Vec<ArchiveFile>, UploadError> {
    let mut checked = check_zip(Cursor::new(zip), limits)?;
    let mut files = Vec::new();
    checked.visit(|entry, reader| {
        let mut data = Vec::new();
        reader
            .read_to_end(&mut data)
            .map_err(|e| UploadError::io("reading", e))?;
        files.push(ArchiveFile {
            path: entry.path.clone(),
            data,
            mode: entry.mode,
        });
        Ok(())
    })?;
    Ok(files)
}

fn read(zip: &[u8]) -> Result<Vec<ArchiveFile>, UploadError> {
    read_zip(zip, &UploadLimits::default())
}

/// A zip of these files, with their modes.
fn zip_files(files: &[ArchiveFile]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for f in files {
        zip.start_file(f.path.as_str(), opts().unix_permissions(f.mode))
            .unwrap();
        zip.write_all(&f.data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn paths_of(files: &[ArchiveFile]) -> Vec<&str> {
    files.iter().map(|f| f.path.as_str()).collect()
}

/// The build context of these files (through a real zip).
fn context_of(
    entrypoint: &str,
    runtime: Runtime,
    files: &[ArchiveFile],
) -> Result<Vec<u8>, UploadError> {
    let zip = zip_files(files);
    build_context(
        "sless",
        runtime,
        entrypoint,
        &mut check_zip(Cursor::new(&zip), &UploadLimits::default())?,
        Vec::new(),
    )
}

fn unpack_files(files: &[ArchiveFile], dest: &std::path::Path) -> Result<(), UploadError> {
    let zip = zip_files(files);
    unpack(
        &mut check_zip(Cursor::new(&zip), &UploadLimits::default())?,
        dest,
    )
}

fn list_source(files: &[ArchiveFile], max_file_bytes: usize) -> Vec<SourceFile> {
    let zip = zip_files(files);
    let limits = SourceLimits {
        max_file_bytes,
        max_total_bytes: usize::MAX,
    };
    source_files(
        &mut check_zip(Cursor::new(&zip), &UploadLimits::default()).unwrap(),
        limits,
    )
    .unwrap()
}

fn file(path: &str, data: &[u8]) -> ArchiveFile {
    ArchiveFile {
        path: path.into(),
        data: data.to_vec(),
        mode: 0o644,
    }
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

/// Offsets of (central directory header, local header) of every entry, walked from
/// the end record, so compressed data can never be mistaken for a header.
fn headers(zip: &[u8]) -> Vec<(usize, usize)> {
    let eocd = (0..=zip.len() - 22)
        .rev()
        .find(|&i| &zip[i..i + 4] == b"PK\x05\x06")
        .unwrap();
    let count = u16_at(zip, eocd + 10);
    let mut at = u32_at(zip, eocd + 16);
    let mut out = Vec::new();
    for _ in 0..count {
        assert_eq!(&zip[at..at + 4], b"PK\x01\x02");
        out.push((at, u32_at(zip, at + 42)));
        at += 46 + u16_at(zip, at + 28) + u16_at(zip, at + 30) + u16_at(zip, at + 32);
    }
    out
}

/// Makes an entry claim a unix file type (e.g. a fifo) in its external attributes.
fn set_unix_mode(zip: &mut [u8], index: usize, mode: u32) {
    let (cd, _) = headers(zip)[index];
    zip[cd + 5] = 3; // "version made by": unix
    zip[cd + 38..cd + 42].copy_from_slice(&(mode << 16).to_le_bytes());
}

/// Makes both headers of an entry lie about its uncompressed size.
fn set_declared_size(zip: &mut [u8], index: usize, size: u32) {
    let (cd, local) = headers(zip)[index];
    zip[cd + 24..cd + 28].copy_from_slice(&size.to_le_bytes());
    zip[local + 22..local + 26].copy_from_slice(&size.to_le_bytes());
}

/// Replaces bytes of an entry name in both headers (same length).
fn patch_name(zip: &mut [u8], index: usize, name: &[u8]) {
    let (cd, local) = headers(zip)[index];
    assert_eq!(u16_at(zip, cd + 28), name.len());
    zip[cd + 46..cd + 46 + name.len()].copy_from_slice(name);
    zip[local + 30..local + 30 + name.len()].copy_from_slice(name);
}

fn unsafe_entry(err: UploadError) -> (String, String) {
    let message = err.to_string();
    match err {
        UploadError::UnsafeEntry { entry, reason } => {
            assert!(message.contains(&format!("{entry:?}")), "{message}");
            (entry, reason)
        }
        other => panic!("expected UnsafeEntry, got {other:?}"),
    }
}

fn context_entries(context: &[u8]) -> Vec<(String, Vec<u8>, u32, u64)> {
    let mut archive = tar::Archive::new(GzDecoder::new(context));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mode = entry.header().mode().unwrap();
            let mtime = entry.header().mtime().unwrap();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            (path, data, mode, mtime)
        })
        .collect()
}

// ---------- read_zip: good zips ----------

#[test]
fn reads_files_in_archive_order_and_skips_folders() {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.add_directory("my-fn/", opts()).unwrap();
    zip.start_file("my-fn/handler.py", opts()).unwrap();
    zip.write_all(b"def handle(event):\n    return event\n")
        .unwrap();
    zip.add_directory("my-fn/lib/", opts()).unwrap();
    zip.start_file("my-fn/lib/util.py", opts().unix_permissions(0o755))
        .unwrap();
    zip.write_all(b"X = 1\n").unwrap();
    let stored = opts().compression_method(CompressionMethod::Stored);
    zip.start_file("./empty.txt", stored).unwrap();
    let bytes = zip.finish().unwrap().into_inner();

    let files = read(&bytes).unwrap();
    let listing: Vec<(&str, u32, usize)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.mode, f.data.len()))
        .collect();
    // The common top folder is kept; "./" is dropped.
    assert_eq!(
        listing,
        [
            ("my-fn/handler.py", 0o644, 36),
            ("my-fn/lib/util.py", 0o755, 6),
            ("empty.txt", 0o644, 0),
        ]
    );
    assert_eq!(files[1].data, b"X = 1\n");
}

#[test]
fn tiny_repetitive_text_never_trips_the_ratio() {
    let text = vec![b'a'; MIB]; // exactly 1 MiB: not ratio-checked
    let files = read(&zip_of(&[("big.txt", &text)])).unwrap();
    assert_eq!(files[0].data.len(), MIB);
}

// ---------- read_zip: malicious and broken zips ----------

#[test]
fn refuses_parent_dir_escape() {
    let (entry, reason) = unsafe_entry(read(&zip_of(&[("../evil.py", b"x")])).unwrap_err());
    assert_eq!(entry, "../evil.py");
    assert!(reason.contains("'..' is not allowed"), "{reason}");
    assert!(reason.contains("relative paths"), "{reason}");
}

#[test]
fn refuses_nested_parent_dir_escape() {
    let (entry, reason) = unsafe_entry(read(&zip_of(&[("a/../../b", b"x")])).unwrap_err());
    assert_eq!(entry, "a/../../b");
    assert!(reason.contains("'..'"), "{reason}");
    // Even a '..' that stays inside is refused: no tool needs it.
    let (entry, _) = unsafe_entry(read(&zip_of(&[("a/../b", b"x")])).unwrap_err());
    assert_eq!(entry, "a/../b");
}

#[test]
fn refuses_absolute_paths() {
    let (entry, reason) = unsafe_entry(read(&zip_of(&[("/etc/passwd", b"root")])).unwrap_err());
    assert_eq!(entry, "/etc/passwd");
    assert!(reason.contains("absolute"), "{reason}");
    let (entry, _) = unsafe_entry(read(&zip_of(&[("C:/Windows/x.dll", b"x")])).unwrap_err());
    assert_eq!(entry, "C:/Windows/x.dll");
}

#[test]
fn refuses_symlinks() {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("ok.py", opts()).unwrap();
    zip.add_symlink("link", "/etc/passwd", opts()).unwrap();
    let bytes = zip.finish().unwrap().into_inner();
    let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
    assert_eq!(entry, "link");
    assert!(
        reason.contains("symbolic links are not allowed"),
        "{reason}"
    );
}

#[test]
fn refuses_symlink_mode_set_by_hand() {
    let mut bytes = zip_of(&[("sneaky", b"/etc/shadow")]);
    set_unix_mode(&mut bytes, 0, 0o120_777);
    let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
    assert_eq!(entry, "sneaky");
    assert!(reason.contains("symbolic link"), "{reason}");
}

#[test]
fn refuses_devices_fifos_and_sockets() {
    for (mode, what) in [
        (0o010_644, "named pipe"),
        (0o020_644, "character device"),
        (0o060_644, "block device"),
        (0o140_644, "socket"),
    ] {
        let mut bytes = zip_of(&[("special", b"")]);
        set_unix_mode(&mut bytes, 0, mode);
        let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
        assert_eq!(entry, "special");
        assert!(reason.contains(what), "{mode:o}: {reason}");
    }
}

#[test]
fn refuses_backslash_nul_and_bad_encoding_in_names() {
    let (entry, reason) = unsafe_entry(read(&zip_of(&[("dir\\evil.py", b"x")])).unwrap_err());
    assert_eq!(entry, "dir\\evil.py");
    assert!(reason.contains("backslash"), "{reason}");

    let mut bytes = zip_of(&[("aXb.py", b"x")]);
    patch_name(&mut bytes, 0, b"a\0b.py");
    let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
    assert_eq!(entry, "a\0b.py");
    assert!(reason.contains("NUL"), "{reason}");

    let mut bytes = zip_of(&[("caf.py", b"x")]);
    patch_name(&mut bytes, 0, b"c\xff\xfe.py");
    let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
    assert!(entry.starts_with('c'), "{entry}");
    assert!(reason.contains("not valid UTF-8"), "{reason}");
}

#[test]
fn refuses_duplicates_and_file_folder_clashes() {
    let (entry, reason) =
        unsafe_entry(read(&zip_of(&[("a.py", b"1"), ("./a.py", b"2")])).unwrap_err());
    assert_eq!(entry, "./a.py");
    assert!(reason.contains("twice"), "{reason}");

    let (entry, reason) =
        unsafe_entry(read(&zip_of(&[("lib", b"1"), ("lib/x.py", b"2")])).unwrap_err());
    assert_eq!(entry, "lib/x.py");
    assert!(reason.contains("both a file and a folder"), "{reason}");
}

#[test]
fn refuses_encrypted_entries() {
    let mut bytes = zip_of(&[("secret.py", b"x")]);
    let (cd, local) = headers(&bytes)[0];
    bytes[cd + 8] |= 1;
    bytes[local + 6] |= 1;
    let (entry, reason) = unsafe_entry(read(&bytes).unwrap_err());
    assert_eq!(entry, "secret.py");
    assert!(reason.contains("encrypted"), "{reason}");
}

#[test]
fn zip_bomb_is_stopped_by_the_total_cap() {
    let limits = UploadLimits {
        max_uncompressed_bytes: 4 * MIB as u64,
        ..UploadLimits::default()
    };
    let bytes = zip_of(&[("zeros.bin", &vec![0u8; 8 * MIB])]);
    assert!(
        bytes.len() < 100 * 1024,
        "the bomb is small: {}",
        bytes.len()
    );
    let err = read_zip(&bytes, &limits).unwrap_err();
    assert!(
        matches!(err, UploadError::Expands { limit } if limit == 4 * MIB as u64),
        "{err:?}"
    );
    assert!(err.is_too_large());
    assert!(err.to_string().contains("4 MiB"), "{err}");
}

#[test]
fn zip_bomb_with_lying_headers_stops_one_byte_past_the_claim() {
    let mut bytes = zip_of(&[("small.txt", b"hello"), ("zeros.bin", &vec![0u8; 8 * MIB])]);
    // The header claims 1000 bytes: the declared sizes pass every check.
    set_declared_size(&mut bytes, 1, 1000);
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(&err, UploadError::NotAZip(m) if m.contains("\"zeros.bin\"") && m.contains("more than its header declares")),
        "{err:?}"
    );
}

#[test]
fn many_small_entries_are_stopped_by_the_archive_ratio() {
    // Each entry is 1 MiB (under the per-entry check); together they expand ~1000:1.
    let data = vec![b'a'; MIB];
    let names: Vec<String> = (0..20).map(|i| format!("f{i}.txt")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &data[..])).collect();
    let bytes = zip_of(&entries);
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(err, UploadError::ArchiveRatio { ratio, limit: 100 } if ratio > 100),
        "{err:?}"
    );
    assert!(err.to_string().contains("100:1"), "{err}");
    // A generous limit lets the same zip through.
    let limits = UploadLimits {
        max_archive_ratio: 10_000,
        ..UploadLimits::default()
    };
    assert_eq!(read_zip(&bytes, &limits).unwrap().len(), 20);
}

#[test]
fn long_paths_are_refused() {
    let component = "d".repeat(200);
    let long = format!("{}handler.py", format!("{component}/").repeat(6));
    let (entry, reason) = unsafe_entry(read(&zip_of(&[(long.as_str(), b"x")])).unwrap_err());
    assert_eq!(entry, long);
    assert!(reason.contains("more than the limit of 1024"), "{reason}");
    let fits = format!("{}handler.py", format!("{component}/").repeat(4));
    assert_eq!(read(&zip_of(&[(fits.as_str(), b"x")])).unwrap().len(), 1);
}

#[test]
fn suspicious_ratio_names_the_entry() {
    let err = read(&zip_of(&[
        ("ok.py", b"x"),
        ("zeros.bin", &vec![0u8; 8 * MIB]),
    ]))
    .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, UploadError::SuspiciousRatio { entry, limit: 200, .. } if entry == "zeros.bin"),
        "{err:?}"
    );
    assert!(message.contains("\"zeros.bin\""), "{message}");
    assert!(!err.is_too_large());
}

#[test]
fn too_many_entries_is_checked_before_inflating() {
    let limits = UploadLimits {
        max_entries: 5,
        ..UploadLimits::default()
    };
    let names: Vec<String> = (0..6).map(|i| format!("f{i}.py")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
    let err = read_zip(&zip_of(&entries), &limits).unwrap_err();
    assert!(
        matches!(err, UploadError::TooManyEntries { count: 6, limit: 5 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("6 entries"), "{err}");
    // Exactly at the limit is fine.
    assert_eq!(read_zip(&zip_of(&entries[..5]), &limits).unwrap().len(), 5);
}

#[test]
fn declared_entry_count_is_checked_before_parsing() {
    let mut bytes = zip_of(&[("a.py", b"x")]);
    let eocd = bytes.len() - 22;
    assert_eq!(&bytes[eocd..eocd + 4], b"PK\x05\x06");
    bytes[eocd + 8..eocd + 10].copy_from_slice(&60_000u16.to_le_bytes());
    bytes[eocd + 10..eocd + 12].copy_from_slice(&60_000u16.to_le_bytes());
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            UploadError::TooManyEntries {
                count: 60_000,
                limit: 10_000
            }
        ),
        "{err:?}"
    );
}

#[test]
fn too_large_zip_is_refused_first() {
    let limits = UploadLimits {
        max_zip_bytes: 100,
        ..UploadLimits::default()
    };
    let err = read_zip(&zip_of(&[("a.py", &[7u8; 500])]), &limits).unwrap_err();
    assert!(
        matches!(err, UploadError::TooLarge { limit: 100 }),
        "{err:?}"
    );
    assert!(err.is_too_large());
    // Even garbage: the size is checked before the format.
    let err = read_zip(&[1u8; 101], &limits).unwrap_err();
    assert!(matches!(err, UploadError::TooLarge { .. }), "{err:?}");
}

#[test]
fn not_a_zip() {
    for bytes in [
        &b"this is not a zip file at all"[..],
        b"",
        b"PK\x03\x04garbage",
    ] {
        let err = read(bytes).unwrap_err();
        assert!(matches!(err, UploadError::NotAZip(_)), "{err:?}");
        assert!(!err.is_too_large());
        assert!(
            err.to_string()
                .starts_with("the upload is not a valid zip archive: "),
            "{err}"
        );
    }
}

#[test]
fn corrupt_entry_data_names_the_entry() {
    let mut bytes = zip_of(&[("handler.py", b"def handle(event): return 1\n")]);
    let (cd, local) = headers(&bytes)[0];
    // Flip the stored CRC: inflating succeeds, the checksum does not.
    bytes[cd + 16] ^= 0xff;
    bytes[local + 14] ^= 0xff;
    let err = read(&bytes).unwrap_err();
    assert!(matches!(err, UploadError::NotAZip(_)), "{err:?}");
    assert!(err.to_string().contains("\"handler.py\""), "{err}");
}

#[test]
fn empty_zips() {
    assert!(matches!(
        read(&zip_of(&[])).unwrap_err(),
        UploadError::Empty
    ));
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.add_directory("only-a-folder/", opts()).unwrap();
    let bytes = zip.finish().unwrap().into_inner();
    let err = read(&bytes).unwrap_err();
    assert!(matches!(err, UploadError::Empty), "{err:?}");
    assert!(err.to_string().contains("no files"), "{err}");
}

// ---------- source_files ----------

#[test]
fn source_files_flags_binary_truncates_and_keeps_empty_files() {
    let mut late_nul = vec![b'a'; 9000];
    late_nul.push(0);
    let files = [
        file("handler.py", b"print('hi')\n"),
        file("lib/deep/util.py", b"X = 1\n"),
        file("empty.txt", b""),
        file("image.png", b"\x89PNG\r\n\x1a\n\0\0\0"),
        file("latin1.txt", b"caf\xe9"),
        file("late-nul.txt", &late_nul),
        file("long.txt", "ab\u{e9}cd".as_bytes()), // é is 2 bytes at offsets 2..4
    ];
    let listing = list_source(&files, 3);
    let names: Vec<&str> = listing.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "handler.py",
            "lib/deep/util.py",
            "empty.txt",
            "image.png",
            "latin1.txt",
            "late-nul.txt",
            "long.txt"
        ]
    );
    // Text over the cap is cut at a char boundary (3 would split the é).
    assert_eq!(
        listing[6],
        SourceFile {
            name: "long.txt".into(),
            content: Some("ab".into()),
            binary: false,
            truncated: true,
            size: 6,
        }
    );
    assert_eq!(listing[2].content.as_deref(), Some(""));
    assert!(!listing[2].binary && !listing[2].truncated);
    for binary in &listing[3..5] {
        assert!(binary.binary && binary.content.is_none() && !binary.truncated);
    }
    // A NUL past the first 8 KiB is still text (valid UTF-8).
    assert!(!listing[5].binary);

    let full = list_source(&files, 1024);
    assert_eq!(full[0].content.as_deref(), Some("print('hi')\n"));
    assert!(!full[0].truncated);
    assert_eq!(full[1].size, 6);
    let json = serde_json::to_value(&full[3]).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"name": "image.png", "content": null, "binary": true, "truncated": false, "size": 11})
    );
}

// ---------- unpack ----------

#[test]
fn unpack_writes_files_with_modes() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("fn");
    let mut run = file("bin/run.sh", b"#!/bin/sh\n");
    run.mode = 0o755;
    unpack_files(&[file("handler.py", b"x = 1\n"), run], &dest).unwrap();
    assert_eq!(std::fs::read(dest.join("handler.py")).unwrap(), b"x = 1\n");
    assert_eq!(
        std::fs::read(dest.join("bin/run.sh")).unwrap(),
        b"#!/bin/sh\n"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| {
            std::fs::metadata(dest.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("bin/run.sh"), 0o755);
        assert_eq!(mode("handler.py"), 0o644);
    }
    // Unpacking again overwrites.
    unpack_files(&[file("handler.py", b"x = 2\n")], &dest).unwrap();
    assert_eq!(std::fs::read(dest.join("handler.py")).unwrap(), b"x = 2\n");
}

#[cfg(unix)]
#[test]
fn unpack_refuses_symlinks_already_in_dest() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    let dest = dir.path().join("fn");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&dest).unwrap();
    std::os::unix::fs::symlink(&outside, dest.join("lib")).unwrap();
    std::os::unix::fs::symlink(outside.join("f"), dest.join("top.py")).unwrap();

    let err = unpack_files(&[file("lib/x.py", b"x")], &dest).unwrap_err();
    assert!(matches!(err, UploadError::UnsafeEntry { .. }), "{err:?}");
    let err = unpack_files(&[file("top.py", b"x")], &dest).unwrap_err();
    assert!(matches!(err, UploadError::UnsafeEntry { .. }), "{err:?}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

// ---------- Dockerfile and build context ----------

#[test]
fn base_images_are_pinned() {
    assert_eq!(BASE_IMAGE_VERSION, "v0.1.0");
    assert_eq!(
        base_image("registry.local/sless", Runtime::Python311),
        "registry.local/sless/runtime-python3.11:v0.1.0"
    );
    assert_eq!(
        base_image("sless/", Runtime::Nodejs20),
        "sless/runtime-nodejs20:v0.1.0"
    );
    assert_eq!(
        base_image("sless", Runtime::Go123),
        "sless/runtime-go1.23:v0.1.0"
    );
    for runtime in Runtime::ALL {
        let image = base_image("sless", runtime);
        assert!(
            image.ends_with(":v0.1.0") && !image.contains("latest"),
            "{image}"
        );
        assert!(image.contains(runtime.as_str()), "{image}");
    }
}

fn lines(text: &str) -> Vec<&str> {
    assert!(text.ends_with('\n'));
    text.lines().collect()
}

#[test]
fn dockerfile_python() {
    let code = [file("handler.py", b"")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Python311,
            "handler.handle",
            &paths_of(&code)
        )),
        [
            "FROM sless/runtime-python3.11:v0.1.0",
            "WORKDIR /app/function",
            "ENV SLESS_ENTRYPOINT=\"handler.handle\"",
            "COPY . /app/function/",
        ]
    );
    let with_deps = [
        file("handler.py", b""),
        file("requirements.txt", b"requests\n"),
    ];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Python311,
            "handler.handle",
            &paths_of(&with_deps)
        )),
        [
            "FROM sless/runtime-python3.11:v0.1.0",
            "WORKDIR /app/function",
            "ENV SLESS_ENTRYPOINT=\"handler.handle\"",
            "COPY . /app/function/",
            "RUN pip install --no-cache-dir -r requirements.txt",
        ]
    );
    // Only a requirements.txt at the root counts.
    let nested = [file("sub/requirements.txt", b"x")];
    assert!(!dockerfile("sless", Runtime::Python311, "a.b", &paths_of(&nested)).contains("pip"));
}

#[test]
fn dockerfile_node() {
    let code = [file("handler.js", b"")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Nodejs20,
            "handler.handle",
            &paths_of(&code)
        )),
        [
            "FROM sless/runtime-nodejs20:v0.1.0",
            "WORKDIR /app/function",
            "ENV SLESS_ENTRYPOINT=\"handler.handle\"",
            "COPY . /app/function/",
        ]
    );
    let with_deps = [file("handler.js", b""), file("package.json", b"{}")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Nodejs20,
            "handler.handle",
            &paths_of(&with_deps)
        ))[4..],
        ["RUN npm install --omit=dev"]
    );
    // A requirements.txt means nothing to node.
    let wrong = [file("requirements.txt", b"x")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Nodejs20,
            "a.b",
            &paths_of(&wrong)
        ))
        .len(),
        4
    );
}

#[test]
fn dockerfile_go() {
    let code = [file("handler.go", b"")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Go123,
            "handler.Handle",
            &paths_of(&code)
        )),
        [
            "FROM sless/runtime-go1.23:v0.1.0",
            "WORKDIR /app/function",
            "ENV SLESS_ENTRYPOINT=\"handler.Handle\"",
            "COPY . /app/function/",
            "RUN /opt/sless/build.sh /app/function /app/bin/function",
        ]
    );
    let with_mod = [file("handler.go", b""), file("go.mod", b"module x\n")];
    assert_eq!(
        lines(&dockerfile(
            "sless",
            Runtime::Go123,
            "handler.Handle",
            &paths_of(&with_mod)
        ))[4..],
        [
            "RUN go mod download",
            "RUN /opt/sless/build.sh /app/function /app/bin/function",
        ]
    );
}

#[test]
fn dockerfile_entrypoint_cannot_inject_instructions() {
    let text = dockerfile(
        "sless",
        Runtime::Python311,
        "a.b\nRUN rm -rf / $HOME\"",
        &[],
    );
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.contains(r#"ENV SLESS_ENTRYPOINT="a.b\nRUN rm -rf / \$HOME\"""#),
        "{text}"
    );
}

#[test]
fn context_has_the_dockerfile_first_then_the_files() {
    let mut run = file("bin/run.sh", b"#!/bin/sh\n");
    run.mode = 0o755;
    let long_name = format!("deep/{}/handler.py", "d".repeat(120));
    let files = [
        file("handler.py", b"def handle(event):\n    return {}\n"),
        file("requirements.txt", b"requests==2.32.3\n"),
        run,
        file(&long_name, b"# long path\n"),
        file("sub/Dockerfile", b"FROM scratch\n"), // only the root name is reserved
    ];
    let context = context_of("handler.handle", Runtime::Python311, &files).unwrap();
    let entries = context_entries(&context);
    let paths: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Dockerfile",
            "handler.py",
            "requirements.txt",
            "bin/run.sh",
            long_name.as_str(),
            "sub/Dockerfile"
        ]
    );
    let generated = dockerfile(
        "sless",
        Runtime::Python311,
        "handler.handle",
        &paths_of(&files),
    );
    assert_eq!(entries[0].1, generated.as_bytes());
    assert_eq!(entries[0].2, 0o644);
    assert_eq!(entries[1].1, files[0].data);
    assert_eq!(entries[3].2, 0o755);
    assert_eq!(entries[4].1, b"# long path\n");
    assert!(entries.iter().all(|e| e.3 == 0), "mtime is fixed");
}

#[test]
fn context_bytes_are_deterministic() {
    let files = read(&zip_of(&[(
        "handler.js",
        b"exports.handle = async () => 1;\n",
    )]))
    .unwrap();
    let a = context_of("handler.handle", Runtime::Nodejs20, &files).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b = context_of("handler.handle", Runtime::Nodejs20, &files).unwrap();
    assert_eq!(a, b);
    let c = context_of("other.handle", Runtime::Nodejs20, &files).unwrap();
    assert_ne!(a, c);
}

#[test]
fn context_refuses_reserved_root_names() {
    for reserved in ["Dockerfile", ".dockerignore", "Dockerfile.dockerignore"] {
        let files = [file("handler.py", b""), file(reserved, b"FROM evil\n")];
        let (entry, reason) =
            unsafe_entry(context_of("handler.handle", Runtime::Python311, &files).unwrap_err());
        assert_eq!(entry, reserved);
        assert!(reason.contains("reserved at the root"), "{reason}");
    }
}
