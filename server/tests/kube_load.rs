//! The controllers' load on the API server at scale: the shipped `sless operator
//! --components controllers` against the kube emulator holding FUNCTIONS built functions
//! (default 1,000), each with an http trigger, spread over NAMESPACES tenants (default
//! 10). Prints how long the first full resync takes (until every function is Ready,
//! the test playing the Deployment controller and the kubelet), then the operator's
//! requests per minute at steady state for MINUTES minutes (default 6: one requeue of
//! every object, 5 minutes apart, falls inside), by verb and resource, from the
//! emulator's request log. A benchmark, not a check: run by `scripts/bench-kube-load`.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::authz::Need;
use common::kube_cluster::{Cluster, cluster, create_namespace};
use kube_emulator::RequestRecord;
use serde_json::json;
use sless_core::model::ANNOTATION_LAST_BUILT_S3KEY;

/// How long the resync may go without a function getting Ready or a trigger active.
const STALL: Duration = Duration::from_secs(120);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

/// `verb resource` as the API server's authorizer reads the request.
fn verb_resource(request: &RequestRecord) -> String {
    match Need::of(request) {
        Some(need) => format!("{} {}", need.verb, need.resource),
        None => "discovery".to_string(),
    }
}

/// What the Deployment controller and the kubelet do for every Deployment whose
/// newest generation they have not reported yet: one running pod per Deployment, and
/// the Deployment available.
fn play_deployment_controller(cluster: &Cluster, pods: &mut HashSet<String>) {
    for deployment in cluster.emu.list("apps/v1", "deployments", None) {
        let meta = &deployment["metadata"];
        let (ns, name) = (
            meta["namespace"].as_str().unwrap(),
            meta["name"].as_str().unwrap(),
        );
        if deployment["status"]["observedGeneration"] == meta["generation"] {
            continue;
        }
        let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
        if replicas > 0 && pods.insert(format!("{ns}/{name}")) {
            cluster.emu.add_deployment_pod(ns, name, None).unwrap();
        }
        cluster
            .emu
            .set_deployment_available(ns, name, replicas)
            .unwrap();
    }
}

/// What the requests of a period cost the emulator: conflicts, and the slowest.
#[derive(Default)]
struct Costs {
    conflicts: u64,
    slowest: Option<RequestRecord>,
}

/// Adds the operator's requests served after the first `seen` to column `column` of
/// `rows` (each `columns` wide) and to `costs`; how many were served in all.
fn tally(
    cluster: &Cluster,
    seen: u64,
    rows: &mut BTreeMap<String, Vec<u64>>,
    costs: &mut Costs,
    columns: usize,
    column: usize,
) -> u64 {
    let (requests, served) = cluster.emu.requests_after(seen);
    for request in requests
        .iter()
        .filter(|r| r.client.as_deref() == Some("operator"))
    {
        rows.entry(verb_resource(request))
            .or_insert_with(|| vec![0; columns])[column] += 1;
        costs.conflicts += u64::from(request.status == 409);
        if costs
            .slowest
            .as_ref()
            .is_none_or(|s| s.duration < request.duration)
        {
            costs.slowest = Some(request.clone());
        }
    }
    served
}

/// Why the resync stopped moving: the requests without an answer, and the operator's log.
fn stalled(cluster: &Cluster, operator: &common::kube_cluster::Operator) -> String {
    let open: Vec<String> = cluster
        .emu
        .open_requests()
        .iter()
        .map(|r| {
            format!(
                "{} {} {}?{} open for {:.1} s",
                r.client.as_deref().unwrap_or("-"),
                r.method,
                r.path,
                r.query,
                r.open_for.as_secs_f64()
            )
        })
        .collect();
    format!(
        "{} requests without an answer in the emulator:\n{}\noperator log:\n{}",
        open.len(),
        open.join("\n"),
        operator.log()
    )
}

fn ready_functions(cluster: &Cluster) -> usize {
    cluster
        .emu
        .list(common::kube_cluster::FUNCTIONS, "functions", None)
        .iter()
        .filter(|f| f["status"]["phase"] == "Ready")
        .count()
}

fn active_triggers(cluster: &Cluster) -> usize {
    cluster
        .emu
        .list(common::kube_cluster::FUNCTIONS, "triggers", None)
        .iter()
        .filter(|t| t["status"]["active"] == true)
        .count()
}

fn print_table(title: &str, columns: &[String], rows: &BTreeMap<String, Vec<u64>>) {
    println!("\n{title}\n");
    println!("| request | {} |", columns.join(" | "));
    println!("|---|{}", "---:|".repeat(columns.len()));
    let mut totals = vec![0; columns.len()];
    for (key, counts) in rows {
        let cells: Vec<String> = counts.iter().map(u64::to_string).collect();
        println!("| {key} | {} |", cells.join(" | "));
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += count;
        }
    }
    let cells: Vec<String> = totals.iter().map(u64::to_string).collect();
    println!("| **all** | {} |", cells.join(" | "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark of several minutes: scripts/bench-kube-load"]
async fn controller_load_with_many_functions() {
    let functions = setting("FUNCTIONS", 1000);
    let namespaces = setting("NAMESPACES", 10);
    let minutes = setting("MINUTES", 6);
    let cluster = cluster().await;

    // The install's registry secret (copied to every tenant), the tenants, and their
    // functions, built, each with an http trigger: what an operator restarting on a
    // busy cluster finds.
    let dockerconfig = base64::engine::general_purpose::STANDARD.encode(r#"{"auths":{}}"#);
    cluster
        .emu
        .create(
            "v1",
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "registry", "namespace": "sless-system"},
                   "data": {".dockerconfigjson": dockerconfig}}),
        )
        .unwrap();
    let tenant = |i: u64| format!("load-{}", i % namespaces);
    for i in 0..namespaces {
        create_namespace(&cluster.client, &tenant(i)).await;
    }
    for i in 0..functions {
        let (ns, name) = (tenant(i), format!("fn-{i}"));
        let key = format!("contexts/{ns}/{name}/1.tar.gz");
        cluster
            .emu
            .create(
                common::kube_cluster::FUNCTIONS,
                "functions",
                json!({"apiVersion": common::kube_cluster::FUNCTIONS, "kind": "Function",
                       "metadata": {"name": name, "namespace": ns,
                                    "annotations": {ANNOTATION_LAST_BUILT_S3KEY: key}},
                       "spec": {"runtime": "python3.11", "entrypoint": "handler.handle",
                                "memoryMb": 128, "timeoutSec": 30, "s3Key": key}}),
            )
            .unwrap();
        cluster
            .emu
            .create(
                common::kube_cluster::FUNCTIONS,
                "triggers",
                json!({"apiVersion": common::kube_cluster::FUNCTIONS, "kind": "Trigger",
                       "metadata": {"name": format!("web-{i}"), "namespace": ns},
                       "spec": {"type": "http", "functionRef": name}}),
            )
            .unwrap();
    }

    let started = Instant::now();
    let operator = cluster.operator_with_env(
        "operator",
        &["--components", "controllers"],
        &[
            ("SLESS_REGISTRY_SECRET", "registry"),
            // The shipped lease, not the tests' short one.
            ("SLESS_LEASE_DURATION_SECS", "15"),
            ("SLESS_LOG", "warn"),
        ],
    );
    let mut pods = HashSet::new();
    // The log keeps the last 10,000 requests: read as they come.
    let mut seen = 0;
    let mut resync_rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut resync_costs = Costs::default();
    let mut functions_ready = None;
    // (functions Ready, triggers active) and since when.
    let mut progress = ((0, 0), Instant::now());
    let resync = loop {
        play_deployment_controller(&cluster, &mut pods);
        seen = tally(&cluster, seen, &mut resync_rows, &mut resync_costs, 1, 0);
        let ready = ready_functions(&cluster) as u64;
        let active = active_triggers(&cluster) as u64;
        if ready == functions {
            functions_ready.get_or_insert(started.elapsed());
            if active == functions {
                break started.elapsed();
            }
        }
        if progress.0 != (ready, active) {
            progress = ((ready, active), Instant::now());
        }
        assert!(
            progress.1.elapsed() < STALL,
            "stalled: for {} s {ready} of {functions} functions Ready, {active} triggers \
             active; {}",
            STALL.as_secs(),
            stalled(&cluster, &operator)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    seen = tally(&cluster, seen, &mut resync_rows, &mut resync_costs, 1, 0);
    assert_eq!(pods.len() as u64, functions, "one pod per function");
    println!(
        "\nFull resync of {functions} functions with {functions} http triggers in {namespaces} \
         namespaces: every function Ready after {:.1} s, every trigger active after {:.1} s",
        functions_ready.unwrap_or(resync).as_secs_f64(),
        resync.as_secs_f64()
    );
    print_table(
        "Requests of the operator during the resync",
        &["count".to_string()],
        &resync_rows,
    );
    if let Some(slowest) = &resync_costs.slowest {
        println!(
            "\n{} conflicts (409); the slowest request took {} ms to answer ({} {})",
            resync_costs.conflicts,
            slowest.duration.as_millis(),
            slowest.method,
            slowest.path
        );
    }

    // Steady state: nothing changes; the requeues fall inside.
    println!(
        "\nSettled functions and triggers are requeued every {} s; the first requeue of \
         all {functions} of each comes about that long after the resync.",
        operator::KubeConfig::new("registry.test")
            .ready_requeue
            .as_secs()
    );
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let minutes = usize::try_from(minutes).unwrap();
    let measuring = Instant::now();
    while measuring.elapsed() < Duration::from_secs(60 * minutes as u64) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        play_deployment_controller(&cluster, &mut pods);
        let minute = (measuring.elapsed().as_secs() / 60) as usize;
        seen = tally(
            &cluster,
            seen,
            &mut rows,
            &mut Costs::default(),
            minutes,
            minute.min(minutes - 1),
        );
    }
    let columns: Vec<String> = (1..=minutes).map(|m| format!("min {m}")).collect();
    print_table(
        "Requests of the operator per minute at steady state",
        &columns,
        &rows,
    );
    assert_eq!(ready_functions(&cluster) as u64, functions);
    assert_eq!(active_triggers(&cluster) as u64, functions);
}
