//! A job's run history on the embedded platform: every run kept with its own event,
//! result, log tail and request id, newest first, cut to `--job-runs-kept`, in the
//! SQLite file (a second opening of it sees the runs).

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::FunctionJob;
use sless_core::store::{Store, StoreExt};
use sless_embedded::sqlite::SqliteStore;

const HANDLER: &[u8] = br#"def handle(event):
    print(f"working on day {event['day']}")
    return {"day": event["day"], "request_id": event.get("_request_id")}
"#;

/// Deploys the function, then runs job `nightly` as runs 1, 2 and 3 (day = run id),
/// each waited for through `/runs`.
async fn three_runs(api: &api::Api<'_>) {
    api.deploy("daily", "python3.11", &[("handler.py", HANDLER)])
        .await;
    for run_id in 1..=3 {
        let event = json!({"day": run_id}).to_string();
        if run_id == 1 {
            api.post(
                "jobs",
                json!({"name": "nightly", "function_ref": "daily", "event_json": event, "run_id": 1}),
            )
            .await;
        } else {
            let (status, body) = api
                .send(
                    reqwest::Method::PATCH,
                    "jobs/nightly",
                    Some(json!({"run_id": run_id, "event_json": event})),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        let runs = api
            .wait_until("jobs/nightly/runs", Duration::from_secs(60), |runs| {
                runs[0]["run_id"] == run_id
                    && matches!(runs[0]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .await;
        assert_eq!(runs[0]["phase"], "Succeeded", "{runs}");
    }
}

#[tokio::test]
async fn every_run_is_kept_with_its_own_result_and_log() {
    let (server, _runner) = TestServer::platform(|_| {}).await;
    let api = api::Api::new(&server, "jobruns");
    three_runs(&api).await;

    let runs = api.get("jobs/nightly/runs").await;
    let runs = runs.as_array().unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| r["run_id"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [3, 2, 1]
    );
    let mut request_ids = Vec::new();
    for run in runs {
        let day = run["run_id"].as_i64().unwrap();
        assert_eq!(run["event_json"], json!({"day": day}).to_string());
        assert!(
            run.get("log_tail").is_none(),
            "the list leaves logs out: {run}"
        );
        assert!(
            run["duration_ms"].is_u64() && run["start_time"].is_string(),
            "{run}"
        );
        // The handler saw the run's request id as `_request_id`.
        let request_id = run["request_id"].as_str().unwrap().to_string();
        let result: Value = serde_json::from_str(run["message"].as_str().unwrap()).unwrap();
        assert_eq!(result, json!({"day": day, "request_id": request_id}));
        let one = api.get(&format!("jobs/nightly/runs/{day}")).await;
        assert_eq!(one["message"], run["message"]);
        let log = one["log_tail"].as_str().unwrap();
        assert!(log.contains(&format!("working on day {day}")), "{log}");
        for other in (1..=3).filter(|d| *d != day) {
            assert!(!log.contains(&format!("day {other}\n")), "{log}");
        }
        request_ids.push(request_id);
    }
    request_ids.dedup();
    assert_eq!(request_ids.len(), 3, "each run has its own id");
    // The job itself describes the latest run.
    let job = api.get("jobs/nightly").await;
    assert_eq!(job["request_id"], runs[0]["request_id"]);
    assert_eq!(
        api.get("jobs/nightly/runs?tail=1")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let (status, body) = api
        .send(reqwest::Method::GET, "jobs/nightly/runs/7", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["error"].as_str().unwrap().contains("has no run \"7\""),
        "{body}"
    );
    let (status, _) = api
        .send(reqwest::Method::GET, "jobs/nobody/runs", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Each run is one of the function's calls too, recorded with its job and request id.
    let listing = api.get("functions/daily/invocations?trigger=job").await;
    let calls = listing["invocations"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{calls:?}");
    for (call, run) in calls.iter().zip(runs) {
        assert_eq!(call["trigger"], "job");
        assert_eq!(call["trigger_name"], "nightly");
        assert_eq!(call["request_id"], run["request_id"]);
        assert_eq!(call["status"], 200);
    }

    // The runs are in the SQLite file: a second opening of it (what a restart does) has them.
    let reopened = SqliteStore::open(server.data_dir()).await.unwrap();
    let store: &dyn Store = &reopened;
    let job = store
        .get_typed::<FunctionJob>(&api.user.ns, "nightly")
        .await
        .unwrap()
        .unwrap();
    let kept: Vec<i64> = job.status.runs.iter().map(|r| r.run_id).collect();
    assert_eq!(kept, [3, 2, 1]);

    // A deleted job's runs go with it.
    let (status, _) = api
        .send(reqwest::Method::DELETE, "jobs/nightly", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api
        .send(reqwest::Method::GET, "jobs/nightly/runs", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_history_keeps_the_newest_runs() {
    let (server, _runner) = TestServer::platform(|c| c.job_runs_kept = 2).await;
    let api = api::Api::new(&server, "jobrunscut");
    three_runs(&api).await;
    let runs = api.get("jobs/nightly/runs").await;
    let kept: Vec<i64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_i64().unwrap())
        .collect();
    assert_eq!(kept, [3, 2]);
    let (status, _) = api
        .send(reqwest::Method::GET, "jobs/nightly/runs/1", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
