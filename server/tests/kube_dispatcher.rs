//! The event dispatcher in Kubernetes mode, run the way `operator/deploy/dispatcher.yaml`
//! runs it: `sless operator` with `SLESS_COMPONENTS=dispatcher` and the environment the
//! kubelet builds from that Deployment (the ConfigMap of `config.yaml`, the broker URL
//! from the Secret `sless-operator`), beside the controllers, against the
//! kube-emulator and a private RabbitMQ. The function's Service is a local HTTP server
//! the test serves, reached through `SLESS_CONNECT_TO`; the test plays the Job
//! controller and the kubelet (build Job conditions, ready replicas).

#[path = "../../crates/gateway/tests/common/broker.rs"]
mod broker;
mod common;

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use common::authz::{assert_authorized, install_documents};
use common::kube_cluster::{
    Cluster, FUNCTIONS, Operator, apply_function, apply_trigger, cluster, create_namespace,
    eventually, eventually_within, triggers, wait_ready,
};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use operator::names::service_authority;
use serde_json::{Value, json};
use sless_core::model::deploy_namespace;

const CONFIG: &str = include_str!("../../operator/deploy/config.yaml");

/// One call the function got: its body and the headers sless sets.
#[derive(Clone, Debug)]
struct Call {
    body: String,
    trigger: String,
    amqp: Value,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// The function behind its Service: notes every call; a body with "fail" gets a 500.
async fn serve_function() -> (String, Calls) {
    let calls = Calls::default();
    let noted = calls.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
        let noted = noted.clone();
        async move {
            let header = |name: &str| {
                headers
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default()
            };
            let amqp = base64::engine::general_purpose::STANDARD
                .decode(header("x-sless-amqp"))
                .ok()
                .and_then(|json| serde_json::from_slice(&json).ok())
                .unwrap_or(Value::Null);
            let body = String::from_utf8_lossy(&body).to_string();
            let fail = body.contains("fail");
            noted.lock().unwrap().push(Call {
                body,
                trigger: header("x-sless-trigger"),
                amqp,
            });
            if fail {
                (StatusCode::INTERNAL_SERVER_ERROR, "boom")
            } else {
                (StatusCode::OK, "ok")
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, calls)
}

/// The install as `kubectl apply` makes it: `config.yaml`'s ConfigMap and the Secret
/// `sless-operator` holding the broker URL (docs/kubernetes.md).
fn install(cluster: &Cluster, amqp_url: &str) {
    let config: Value = serde_yaml::from_str(CONFIG).unwrap();
    cluster.emu.create("v1", "configmaps", config).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(amqp_url);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sless-operator", "namespace": "sless-system"},
        "data": {"SLESS_AMQP_URL": encoded}});
    cluster.emu.create("v1", "secrets", secret).unwrap();
}

/// The dispatcher Deployment's container: its args after `sless`, and the environment
/// the kubelet gives it, resolved from the emulator's ConfigMaps and Secrets.
fn dispatcher_container(cluster: &Cluster) -> (Vec<String>, HashMap<String, String>) {
    let deployment = install_documents("dispatcher.yaml")
        .into_iter()
        .find(|object| object["kind"] == "Deployment")
        .expect("dispatcher.yaml has a Deployment");
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let lookup =
        |plural: &str, name: &Value| cluster.get("v1", plural, namespace, name.as_str().unwrap());
    let mut env = HashMap::new();
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let map = lookup("configmaps", &source["configMapRef"]["name"]).unwrap();
        for (key, value) in map["data"].as_object().unwrap() {
            env.insert(key.clone(), value.as_str().unwrap().to_string());
        }
    }
    for variable in container["env"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap().to_string();
        let from = &variable["valueFrom"];
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_string()
        } else if from["fieldRef"]["fieldPath"] == "metadata.namespace" {
            namespace.to_string()
        } else if let Some(key) = from["secretKeyRef"]["key"].as_str() {
            let secret = lookup("secrets", &from["secretKeyRef"]["name"]).unwrap();
            let encoded = secret["data"][key].as_str().unwrap();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap();
            String::from_utf8(decoded).unwrap()
        } else {
            panic!("an env source the test does not resolve: {variable}");
        };
        env.insert(name, value);
    }
    (args, env)
}

/// `sless operator` as the dispatcher Deployment runs it, plus the test's settings: a
/// short lease, and the function Services it reaches through `connect_to`.
fn start_dispatcher(cluster: &Cluster, connect_to: Option<&str>) -> Operator {
    let (args, mut env) = dispatcher_container(cluster);
    assert_eq!(args[..1], ["operator"]);
    assert_eq!(env["SLESS_COMPONENTS"], "dispatcher");
    // Port 8080 is not the test's: `--listen` overrides SLESS_LISTEN.
    env.insert("SLESS_LEASE_DURATION_SECS".into(), "2".into());
    if let Some(connect_to) = connect_to {
        env.insert("SLESS_CONNECT_TO".into(), connect_to.into());
    }
    let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    cluster.spawn("dispatcher", &args, env)
}

fn trigger_status(cluster: &Cluster, ns: &str, name: &str) -> Value {
    cluster
        .get(FUNCTIONS, "triggers", ns, name)
        .map(|t| t["status"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_component_consumes_for_an_applied_trigger_and_stops_when_disabled() {
    let broker = broker::Broker::start().await;
    let cluster = cluster().await;
    install(&cluster, &broker.url());
    let ns = "team-e";
    create_namespace(&cluster.client, ns).await;
    let deploy_ns = deploy_namespace(ns);
    let (address, calls) = serve_function().await;
    let authority = service_authority(ns, "hello", "cluster.local");
    let controllers = cluster.operator("controllers", &["--components", "controllers"]);
    wait_ready(&controllers).await;
    let dispatcher = start_dispatcher(&cluster, Some(&format!("{authority}={address}")));
    wait_ready(&dispatcher).await;

    // A function built and deployed by the controllers, its pod ready.
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    let build = apply_function(&functions, &resource, ns, "hello").await;
    eventually(&controllers, "the build Job", || {
        cluster.get(
            "batch/v1",
            "jobs",
            &sless_core::model::build_namespace(ns),
            &build,
        )
    })
    .await;
    cluster.finish_job(&sless_core::model::build_namespace(ns), &build, true);

    // A queue that exists with other arguments, for a second trigger: refused on
    // every declare, its consumer must back off rather than spin.
    let client = broker.client().await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(5));
    client
        .channel
        .queue_declare("clash".into(), QueueDeclareOptions::durable(), arguments)
        .await
        .unwrap();

    // Event triggers applied as kubectl would.
    let clash = json!({"type": "event", "functionRef": "hello", "queue": "clash"});
    apply_trigger(&cluster, ns, "clash-in", clash).await;
    let orders =
        json!({"type": "event", "functionRef": "hello", "queue": "orders", "maxRetries": 1});
    apply_trigger(&cluster, ns, "orders-in", orders).await;
    let deployment = eventually(&controllers, "one replica for the trigger", || {
        cluster
            .get("apps/v1", "deployments", &deploy_ns, "hello")
            .filter(|d| d["spec"]["replicas"] == 1)
    })
    .await;
    assert_eq!(deployment["spec"]["replicas"], 1);
    cluster
        .emu
        .update_status(
            "apps/v1",
            "deployments",
            Some(&deploy_ns),
            "hello",
            json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}),
        )
        .unwrap();
    eventually(&dispatcher, "the trigger active", || {
        (trigger_status(&cluster, ns, "orders-in")["active"] == true).then_some(())
    })
    .await;

    // Published messages reach the function and are acked; one that fails is retried
    // once and then dead-lettered.
    for (id, body) in [
        ("m1", "{\"n\": 1}"),
        ("m2", "{\"n\": 2}"),
        ("m3", "\"fail\""),
    ] {
        client.publish("orders", body.as_bytes(), id).await;
    }
    let status = eventually_within(
        &dispatcher,
        "2 delivered, 1 dead-lettered in the status",
        std::time::Duration::from_secs(20),
        || {
            let status = trigger_status(&cluster, ns, "orders-in");
            (status["delivered"] == 2 && status["deadLettered"] == 1).then_some(status)
        },
    )
    .await;
    assert_eq!(status["failed"], 2, "{status}");
    assert!(status["lastMessageTime"].is_string(), "{status}");
    assert_eq!(client.depth("orders").await, 0);
    assert_eq!(client.depth("orders.dead").await, 1);
    let seen = calls.lock().unwrap().clone();
    let mut bodies: Vec<&str> = seen.iter().map(|c| c.body.as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["\"fail\"", "\"fail\"", "{\"n\": 1}", "{\"n\": 2}"]);
    let first = seen.iter().find(|c| c.body == "{\"n\": 1}").unwrap();
    assert_eq!(first.trigger, "orders-in");
    assert_eq!(first.amqp["queue"], "orders");
    assert_eq!(first.amqp["message_id"], "m1");

    // The clashing queue is said with what to do; restarts wait 1 s, 2 s, 4 s …: the
    // failures in the log are about as many as the doublings of the wait.
    let (message, waits) = eventually_within(
        &dispatcher,
        "the clash said, with a wait of 4 s or more",
        std::time::Duration::from_secs(30),
        || {
            let status = trigger_status(&cluster, ns, "clash-in");
            let message = status["message"].as_str()?.to_string();
            let waits: u64 = message
                .rsplit_once("retrying in ")?
                .1
                .strip_suffix(" s")?
                .parse()
                .ok()?;
            (waits >= 4).then_some((message, waits))
        },
    )
    .await;
    assert!(
        message.starts_with("queue \"clash\" exists with different arguments"),
        "{message}"
    );
    let failures = dispatcher
        .log()
        .lines()
        .filter(|l| l.contains("event consumer stopped") && l.contains("clash"))
        .count();
    let doublings = usize::try_from(waits.ilog2()).unwrap();
    assert!(
        (1..=doublings + 3).contains(&failures),
        "{failures} failures for a wait of {waits} s"
    );

    // Disabled: the consumer stops and a new message stays in the queue.
    triggers(&cluster, ns)
        .patch(
            "orders-in",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"enabled": false}})),
        )
        .await
        .unwrap();
    eventually(&dispatcher, "the trigger inactive", || {
        (trigger_status(&cluster, ns, "orders-in")["active"] == false).then_some(())
    })
    .await;
    client.publish("orders", b"{\"n\": 4}", "m4").await;
    assert_eq!(client.depth("orders").await, 1);
    assert_eq!(calls.lock().unwrap().len(), 4);

    // Every request it made is one its RBAC in dispatcher.yaml allows (the emulator
    // authorizes nothing itself); among them, status writes of triggers.
    let needs = assert_authorized(
        &cluster.emu,
        "dispatcher",
        &["dispatcher.yaml"],
        "sless-dispatcher",
    );
    let status_written = needs.iter().any(|need| {
        need.resource == "triggers/status" && matches!(need.verb.as_str(), "update" | "patch")
    });
    assert!(status_written, "no trigger status written");

    let log = dispatcher.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// `amqps://` takes the TLS path (rustls, one crypto provider in the process): a peer
/// that does not speak TLS is a clear status message, never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_broker_url_to_a_plain_peer_is_a_clear_status_message() {
    let cluster = cluster().await;
    let peer = StdListener::bind("127.0.0.1:0").unwrap();
    let port = peer.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in peer.incoming() {
            let mut stream = stream.unwrap();
            let _ = std::io::Write::write_all(&mut stream, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    install(
        &cluster,
        &format!("amqps://guest:guest@127.0.0.1:{port}/%2f"),
    );
    let dispatcher = start_dispatcher(&cluster, None);
    wait_ready(&dispatcher).await;
    let ns = "team-t";
    create_namespace(&cluster.client, ns).await;
    let secure = json!({"type": "event", "functionRef": "hello", "queue": "q"});
    apply_trigger(&cluster, ns, "secure", secure).await;
    let message = eventually(&dispatcher, "the broker error in the status", || {
        let status = trigger_status(&cluster, ns, "secure");
        status["message"].as_str().map(str::to_string)
    })
    .await;
    assert!(message.contains("broker unreachable"), "{message}");
    assert_eq!(trigger_status(&cluster, ns, "secure")["active"], false);
    let log = dispatcher.log();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_malformed_connect_to_is_refused_before_anything_starts() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["operator", "--components", "dispatcher"])
        .env_clear()
        .env("SLESS_CONNECT_TO", "hello.svc:8080=nowhere")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"nowhere\" is not HOST:PORT"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
