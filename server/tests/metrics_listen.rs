//! `--metrics-listen`: the scrape address serves `/metrics` without a token, while the
//! main address keeps asking for an admin one.

mod common;

#[tokio::test]
async fn a_scraper_reads_metrics_on_its_own_address() {
    let data = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let scrape_address = free.local_addr().unwrap().to_string();
    drop(free);
    let server = common::start_with_env(data.path(), &[("SLESS_METRICS_LISTEN", &scrape_address)]);
    let http = reqwest::Client::new();

    let scraped = http
        .get(format!("http://{scrape_address}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    let content_type = scraped.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    // Nothing was called yet: an exposition with no series.
    let text = scraped.text().await.unwrap();
    assert!(text.trim_end().ends_with("# EOF"), "{text}");

    let main = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 401, "the main address needs a token");
    let other = http
        .get(format!("http://{scrape_address}/v1/namespaces/x/functions"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        other.status(),
        404,
        "the scrape address serves only /metrics"
    );
}
