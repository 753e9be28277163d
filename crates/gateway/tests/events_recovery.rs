//! Event triggers when the broker goes away mid-stream: the dispatcher reconnects
//! with backoff, says so in the status meanwhile, and no message is lost. Its own
//! binary (so its own broker): the restart would disturb the counts of other tests.

mod common;

use std::time::Duration;

use common::api::Api;
use common::broker::Broker;
use common::events::*;
use serde_json::json;

#[tokio::test]
async fn a_broker_restart_mid_stream_loses_no_message() {
    let mut broker = Broker::start().await;
    let server = platform(Some(broker.url())).await;
    let api = Api::new(&server, "events-restart");
    deploy(&api, "steady", "steady-orders", json!({"concurrency": 4})).await;

    let ids = ids("steady", 200);
    {
        let client = broker.client().await;
        for id in &ids {
            client
                .publish(
                    "steady-orders",
                    json!({"sleep": 0.02}).to_string().as_bytes(),
                    id,
                )
                .await;
        }
    }
    wait_calls(&api, "steady", Duration::from_secs(60), |c| c.len() >= 20).await;
    broker.kill();
    // The consumer's channel may fail first; then the connection is seen lost.
    api.wait_until("triggers/steady", Duration::from_secs(30), |t| {
        t["active"] == false
            && t["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("broker"))
    })
    .await;
    broker.restart().await;

    let calls = wait_calls(&api, "steady", Duration::from_secs(120), |c| {
        successes(c).len() == 200
    })
    .await;
    assert!(
        ids.iter().all(|id| successes(&calls).contains_key(id)),
        "every published message was processed at least once"
    );
    api.wait_until("triggers/steady", Duration::from_secs(30), |t| {
        t["active"] == true && t["message"].is_null()
    })
    .await;
    let client = broker.client().await;
    assert_eq!(client.depth("steady-orders").await, 0, "none left behind");
    println!("{} calls for 200 messages across the restart", calls.len());
}
