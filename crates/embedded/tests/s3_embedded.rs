//! The embedded S3 endpoint served to the real aws-sdk-s3 client on loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use sless_core::s3::{ObjectStore, S3Config, StorageError};
use sless_embedded::s3::EmbeddedS3;
use tempfile::TempDir;

const BUCKET: &str = "sless-test";

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

async fn started(dir: &TempDir) -> (EmbeddedS3, ObjectStore) {
    let s3 = EmbeddedS3::start(dir.path(), any_port())
        .await
        .expect("start embedded S3");
    let store = ObjectStore::connect(&s3.config(BUCKET))
        .await
        .expect("connect");
    store.ensure_bucket().await.expect("ensure_bucket");
    (s3, store)
}

/// A few MiB of non-text bytes, so nothing passes by accident of encoding.
fn binary_body(len: usize) -> Bytes {
    let mut x: u32 = 0x9E37_79B9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn ensure_bucket_is_idempotent() {
    let dir = TempDir::new().unwrap();
    let (s3, store) = started(&dir).await;
    store.ensure_bucket().await.expect("second ensure_bucket");
    assert_eq!(store.bucket(), BUCKET);
    assert!(s3.endpoint().starts_with("http://127.0.0.1:"));
    // A second client (same credentials) also sees the bucket as ready.
    let other = ObjectStore::connect(&s3.config(BUCKET)).await.unwrap();
    other
        .ensure_bucket()
        .await
        .expect("ensure_bucket from another client");
}

#[tokio::test]
async fn put_get_exists_list_delete() {
    let dir = TempDir::new().unwrap();
    let (_s3, store) = started(&dir).await;

    let body = binary_body(3 * 1024 * 1024 + 17);
    let key = "functions/ns1/hello/20250101120000.zip";
    store
        .put(key, body.clone(), "application/zip")
        .await
        .expect("put");
    let got = store.get(key).await.expect("get").expect("object present");
    assert_eq!(got.len(), body.len());
    assert!(got == body, "round-tripped body differs");

    // The content type is stored, as seen through the plain S3 API.
    let head = store
        .client()
        .head_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_type(), Some("application/zip"));
    assert_eq!(head.content_length(), Some(body.len() as i64));

    assert_eq!(store.get("functions/ns1/missing.zip").await.unwrap(), None);
    assert!(store.exists(key).await.unwrap());
    assert!(!store.exists("functions/ns1/missing.zip").await.unwrap());

    for k in [
        "functions/ns1/hello/20250101120000.context.tar.gz",
        "functions/ns1/other/20250101120000.zip",
        "functions/ns2/hello/20250101120000.zip",
        "jobs/ns1/x/1.zip",
    ] {
        store
            .put(k, Bytes::from_static(b"x"), "application/octet-stream")
            .await
            .unwrap();
    }
    let mut keys = store.list("functions/ns1/hello/").await.unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "functions/ns1/hello/20250101120000.context.tar.gz",
            "functions/ns1/hello/20250101120000.zip",
        ]
    );
    assert_eq!(store.list("functions/ns1/").await.unwrap().len(), 3);
    assert_eq!(store.list("functions/").await.unwrap().len(), 4);
    assert_eq!(store.list("").await.unwrap().len(), 5);
    assert!(store.list("nothing/").await.unwrap().is_empty());

    store.delete(key).await.expect("delete");
    assert!(!store.exists(key).await.unwrap());
    assert_eq!(store.get(key).await.unwrap(), None);
    store
        .delete(key)
        .await
        .expect("deleting a missing key is fine");
    assert_eq!(store.list("functions/ns1/hello/").await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_follows_pagination() {
    let dir = TempDir::new().unwrap();
    let (_s3, store) = started(&dir).await;
    // One more than a default page (1000 keys), a few at a time to keep it quick
    // (a thousand simultaneous connects would overflow the listen backlog).
    let puts = futures::stream::iter(0..1001).map(|i| {
        let store = store.clone();
        async move {
            let k = format!("functions/ns/name/{i:04}.zip");
            store
                .put(&k, Bytes::from_static(b"z"), "application/zip")
                .await
        }
    });
    let results: Vec<_> = puts.buffer_unordered(64).collect().await;
    assert!(results.iter().all(Result::is_ok));
    store
        .put(
            "functions/other/x.zip",
            Bytes::from_static(b"z"),
            "application/zip",
        )
        .await
        .unwrap();
    let first = store
        .client()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix("functions/ns/")
        .send()
        .await
        .unwrap();
    assert_eq!(first.is_truncated(), Some(true), "the server pages at 1000");
    let keys = store.list("functions/ns/name/").await.unwrap();
    assert_eq!(keys.len(), 1001);
    assert!(keys.iter().all(|k| k.starts_with("functions/ns/name/")));
}

#[tokio::test]
async fn data_survives_restart_on_same_root() {
    let dir = TempDir::new().unwrap();
    let body = binary_body(64 * 1024);
    let first_endpoint;
    let first_config;
    {
        let (s3, store) = started(&dir).await;
        store
            .put("functions/a/b/1.zip", body.clone(), "application/zip")
            .await
            .unwrap();
        first_endpoint = s3.endpoint();
        first_config = s3.config(BUCKET);
    } // dropped: the server stops

    let (s3, store) = started(&dir).await;
    assert_ne!(s3.endpoint(), first_endpoint, "a new free port each start");
    assert_ne!(s3.config(BUCKET).access_key_id, first_config.access_key_id);
    assert_ne!(
        s3.config(BUCKET).secret_access_key,
        first_config.secret_access_key
    );
    assert_eq!(store.get("functions/a/b/1.zip").await.unwrap(), Some(body));

    // The old credentials do not work on the new endpoint.
    let stale = S3Config {
        endpoint: Some(s3.endpoint()),
        ..first_config
    };
    let stale = ObjectStore::connect(&stale).await.unwrap();
    assert!(stale.get("functions/a/b/1.zip").await.is_err());
}

#[tokio::test]
async fn wrong_credentials_are_refused() {
    let dir = TempDir::new().unwrap();
    let (s3, store) = started(&dir).await;
    store
        .put("k", Bytes::from_static(b"secret"), "text/plain")
        .await
        .unwrap();

    let good = s3.config(BUCKET);
    let wrong_secret = S3Config {
        secret_access_key: Some("not-the-secret".into()),
        ..good.clone()
    };
    let unknown_key = S3Config {
        access_key_id: Some("AKIDUNKNOWN".into()),
        ..good
    };
    for cfg in [wrong_secret, unknown_key] {
        let bad = ObjectStore::connect(&cfg).await.unwrap();
        let err = bad.get("k").await.expect_err("get with bad credentials");
        assert!(matches!(err, StorageError::Denied { .. }), "{err}");
        let err = bad
            .put("k2", Bytes::from_static(b"x"), "text/plain")
            .await
            .expect_err("put");
        assert!(matches!(err, StorageError::Denied { .. }), "{err}");
        // HEAD answers carry no error code; they must still read as refused access.
        for err in [
            bad.ensure_bucket().await.err(),
            bad.exists("k").await.err(),
            bad.list("").await.err(),
        ] {
            assert!(matches!(err, Some(StorageError::Denied { .. })), "{err:?}");
        }
    }
    assert!(
        !store.exists("k2").await.unwrap(),
        "refused put wrote nothing"
    );
}

#[tokio::test]
async fn closed_port_is_unreachable_quickly() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind(any_port())
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let store = ObjectStore::connect(&S3Config {
        endpoint: Some(endpoint.clone()),
        region: "us-east-1".into(),
        bucket: BUCKET.into(),
        access_key_id: Some("a".into()),
        secret_access_key: Some("b".into()),
        force_path_style: true,
    })
    .await
    .unwrap();

    let t0 = Instant::now();
    let err = store.get("k").await.expect_err("nothing listens there");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(matches!(err, StorageError::Unreachable { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&endpoint) && msg.contains("SLESS_S3_ENDPOINT"),
        "{msg}"
    );

    let err = store.ensure_bucket().await.expect_err("ensure_bucket");
    assert!(matches!(err, StorageError::Unreachable { .. }), "{err}");
}

#[tokio::test]
async fn missing_bucket_is_reported() {
    let dir = TempDir::new().unwrap();
    let (s3, _store) = started(&dir).await;
    let other = ObjectStore::connect(&s3.config("not-created"))
        .await
        .unwrap();
    // (s3s-fs quietly creates the bucket directory on put, so ask with list.)
    let err = other.list("").await.expect_err("no bucket");
    assert!(matches!(err, StorageError::NoSuchBucket { .. }), "{err}");
    assert!(err.to_string().contains("not-created"), "{err}");
}

#[tokio::test]
async fn half_credentials_are_a_config_error() {
    let cfg = S3Config {
        endpoint: None,
        region: "us-east-1".into(),
        bucket: BUCKET.into(),
        access_key_id: Some("a".into()),
        secret_access_key: None,
        force_path_style: false,
    };
    assert!(matches!(
        ObjectStore::connect(&cfg).await.err(),
        Some(StorageError::Config(_))
    ));
}
