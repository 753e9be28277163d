//! Uploads are spooled to disk, never held whole in memory: five concurrent 50 MB
//! uploads (and the builds they start) raise a real `sless up`'s peak RSS by at most
//! 100 MiB.

mod common;

use std::time::{Duration, Instant};

use common::{start, token};
use rand::RngCore;
use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;

/// A `/proc/<pid>/status` field in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kib * 1024
}

/// A valid zip just under 50 MiB: a handler and random (incompressible) data, stored.
fn big_zip() -> Vec<u8> {
    let mut data = vec![0u8; (50 * MIB - 64 * 1024) as usize];
    rand::rng().fill_bytes(&mut data);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("handler.py", stored).unwrap();
    std::io::Write::write_all(&mut zip, b"def handle(e):\n    return 1\n").unwrap();
    zip.start_file("data.bin", stored).unwrap();
    std::io::Write::write_all(&mut zip, &data).unwrap();
    zip.finish().unwrap().into_inner()
}

async fn upload(client: &reqwest::Client, url: String, token: &str, zip: Vec<u8>) {
    let form = reqwest::multipart::Form::new().part(
        "code",
        reqwest::multipart::Part::bytes(zip).file_name("f.zip"),
    );
    let response = client
        .post(url)
        .bearer_auth(token)
        .multipart(form)
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn five_concurrent_50_mb_uploads_keep_rss_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sless = start(&data);
    let pid = sless.pid();
    let client = reqwest::Client::new();
    // Five tenants: each namespace has its own upload places.
    let tenants: Vec<(String, String)> = (0..5)
        .map(|i| {
            let sub = format!("uploader{i}");
            (
                token(&data, &sub),
                sless_core::model::namespace_for_sub(&sub),
            )
        })
        .collect();
    let api = |ns: &str, path: &str| format!("{}/v1/namespaces/{ns}/{path}", sless.base);
    for (token, ns) in &tenants {
        for name in ["big", "warm"] {
            let created = client
                .post(api(ns, "functions"))
                .bearer_auth(token)
                .json(&json!({"name": name, "runtime": "python3.11"}))
                .send()
                .await
                .unwrap();
            assert_eq!(created.status(), 201);
        }
    }
    // A small upload first, so the baseline has every code path paged in.
    let (token0, ns0) = &tenants[0];
    let small = {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, b"def handle(e):\n    return 1\n").unwrap();
        zip.finish().unwrap().into_inner()
    };
    upload(&client, api(ns0, "functions/warm/upload"), token0, small).await;
    let zip = big_zip();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = status_bytes(pid, "VmRSS");
    // Resets VmHWM to the current RSS: from here on it is the peak of the uploads.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let started = Instant::now();
    futures::future::join_all(
        tenants.iter().map(|(token, ns)| {
            upload(&client, api(ns, "functions/big/upload"), token, zip.clone())
        }),
    )
    .await;
    let uploaded_in = started.elapsed();
    // The builds fetch and unpack the same zips: they count too.
    for (token, ns) in &tenants {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let function: Value = common::get_json(&client, &api(ns, "functions/big"), token).await;
            if function["phase"] == "Ready" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the build did not finish: {function}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let peak = status_bytes(pid, "VmHWM");
    let rise = peak.saturating_sub(before);
    eprintln!(
        "sless RSS before {} MiB, peak {} MiB (+{} MiB); uploads took {} ms",
        before / MIB,
        peak / MIB,
        rise / MIB,
        uploaded_in.as_millis()
    );
    assert!(
        rise <= 100 * MIB,
        "five concurrent 50 MB uploads raised the peak RSS by {} MiB (from {} MiB)",
        rise / MIB,
        before / MIB
    );
}
