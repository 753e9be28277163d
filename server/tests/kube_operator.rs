//! The shipped binary in Kubernetes mode, run the way a cluster runs it: `sless operator`
//! as a process with a kubeconfig pointing at a Kubernetes API served over HTTP on
//! loopback (the `kube-emulator` crate), a real S3 endpoint, and the flows driven
//! through the operator's REST API and through CRs applied as `kubectl apply` would.
//! The test plays the Job and Deployment controllers and the kubelet (Job conditions,
//! Deployment availability, pods, their waiting reasons and logs).

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kube_cluster::{
    FUNCTIONS, Operator, SECRET, apply_function, cluster, create_namespace, eventually,
    eventually_within, free_port, wait_ready,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use operator::names::{build_job_name, run_job_name};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_core::model::{build_namespace, deploy_namespace, namespace_for_sub};

fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(content).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// A user of the REST API.
struct User {
    http: reqwest::Client,
    base: String,
    ns: String,
    token: String,
}

impl User {
    fn new(operator: &Operator, sub: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: operator.base.clone(),
            ns: namespace_for_sub(sub),
            token: sless_core::auth::issue_hs256(SECRET.as_bytes(), sub, 3600).unwrap(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}/{path}", self.base, self.ns)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.bearer_auth(&self.token).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.http.post(self.url(path)).json(&body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.http.patch(self.url(path)).json(&body)).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.http.get(self.url(path))).await
    }

    async fn delete(&self, path: &str) -> StatusCode {
        self.send(self.http.delete(self.url(path))).await.0
    }

    /// Uploads a one-file python handler; the new s3 key.
    async fn upload(&self, collection: &str, name: &str) -> String {
        let form = reqwest::multipart::Form::new().part(
            "code",
            reqwest::multipart::Part::bytes(zip_of(&[(
                "handler.py",
                b"def handle(event):\n    return event\n",
            )]))
            .file_name("code.zip"),
        );
        let (status, body) = self
            .send(
                self.http
                    .post(self.url(&format!("{collection}/{name}/upload")))
                    .multipart(form),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["phase"], "Building");
        body["s3_key"].as_str().unwrap().to_string()
    }
}

fn replicas(deployment: &Value) -> i64 {
    deployment["spec"]["replicas"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_runs_every_flow_against_an_api_server_over_http() {
    let cluster = cluster().await;
    let operator = cluster.operator("operator", &[]);
    wait_ready(&operator).await;
    let alice = User::new(&operator, "alice");
    let ns = alice.ns.clone();
    let deploy_ns = deploy_namespace(&ns);
    let build_ns = build_namespace(&ns);

    // Function + upload → build Job → Complete → Deployment + Service → Ready.
    let (status, body) = alice
        .post(
            "functions",
            json!({"name": "hello", "runtime": "python3.11"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let key = alice.upload("functions", "hello").await;
    let build = build_job_name("hello", &key);
    let job = eventually(&operator, "the build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &build)
    })
    .await;
    let build_pod = &job["spec"]["template"]["spec"];
    assert_eq!(build_pod["initContainers"][0]["name"], "fetch-context");
    // Builds run where rootless BuildKit is allowed; functions under `restricted`.
    let pod_security = |namespace: &str| {
        let object = cluster.emu.get("v1", "namespaces", None, namespace)?;
        object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(pod_security(&build_ns).as_deref(), Some("privileged"));
    cluster.finish_job(&build_ns, &build, true);
    eventually(&operator, "the Deployment and Service", || {
        cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
        cluster.get("v1", "services", &deploy_ns, "hello")
    })
    .await;
    assert_eq!(pod_security(&deploy_ns).as_deref(), Some("restricted"));
    let function = eventually(&operator, "phase Ready", || {
        cluster
            .get(FUNCTIONS, "functions", &ns, "hello")
            .filter(|f| f["status"]["phase"] == "Ready")
    })
    .await;
    let ready = &function["status"]["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"]),
        (&json!("Ready"), &json!("True"))
    );
    assert_eq!(
        ready["observedGeneration"],
        function["metadata"]["generation"]
    );
    let (_, body) = alice.get("functions/hello").await;
    assert_eq!(body["phase"], "Ready", "{body}");
    let events = cluster.events(&ns);
    for reason in ["BuildStarted", "BuildSucceeded"] {
        assert!(
            events
                .iter()
                .any(|(name, r, _)| name == "hello" && r == reason),
            "{reason} missing from {events:?}"
        );
    }

    // A failed build → Failed with the log's tail.
    alice
        .post(
            "functions",
            json!({"name": "broken", "runtime": "python3.11"}),
        )
        .await;
    let broken_key = alice.upload("functions", "broken").await;
    let broken_build = build_job_name("broken", &broken_key);
    eventually(&operator, "the failing build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &broken_build)
    })
    .await;
    cluster.job_pod_with_log(
        &build_ns,
        &broken_build,
        "#1 load build definition\nERROR: failed to solve: pip install exited 1\n",
    );
    cluster.finish_job(&build_ns, &broken_build, false);
    let broken = eventually(&operator, "phase Failed", || {
        cluster
            .get(FUNCTIONS, "functions", &ns, "broken")
            .filter(|f| f["status"]["phase"] == "Failed")
    })
    .await;
    let message = broken["status"]["message"].as_str().unwrap();
    assert!(message.contains("pip install exited 1"), "{message}");
    assert!(
        cluster
            .events(&ns)
            .iter()
            .any(|(name, r, t)| name == "broken" && r == "BuildFailed" && t == "Warning")
    );

    // http and cron triggers; enabled=false stops both, back on starts them.
    let (status, body) = alice
        .post(
            "triggers",
            json!({"name": "web", "type": "http", "function_ref": "hello"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = alice
        .post(
            "triggers",
            json!({"name": "tick", "type": "cron", "function_ref": "hello", "schedule": "*/5 * * * *"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    eventually(&operator, "an Ingress, a CronJob and one replica", || {
        let ingresses = cluster.names("networking.k8s.io/v1", "ingresses", &deploy_ns);
        let crons = cluster.names("batch/v1", "cronjobs", &deploy_ns);
        let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
        (ingresses.len() == 1 && crons.len() == 1 && replicas(&deployment) == 1).then_some(())
    })
    .await;
    let web = cluster.get(FUNCTIONS, "triggers", &ns, "web").unwrap();
    assert_eq!(
        web["status"]["url"],
        format!("http://fn.test/fn/{ns}/hello")
    );
    for trigger in ["web", "tick"] {
        let (status, body) = alice
            .patch(&format!("triggers/{trigger}"), json!({"enabled": false}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    eventually(
        &operator,
        "0 replicas, the CronJob suspended, no Ingress",
        || {
            let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
            let crons = cluster.emu.list("batch/v1", "cronjobs", Some(&deploy_ns));
            let ingresses = cluster.names("networking.k8s.io/v1", "ingresses", &deploy_ns);
            (replicas(&deployment) == 0
                && crons.first()?["spec"]["suspend"] == true
                && ingresses.is_empty())
            .then_some(())
        },
    )
    .await;
    for trigger in ["web", "tick"] {
        alice
            .patch(&format!("triggers/{trigger}"), json!({"enabled": true}))
            .await;
    }
    eventually(&operator, "1 replica, the CronJob running again", || {
        let deployment = cluster.get("apps/v1", "deployments", &deploy_ns, "hello")?;
        let crons = cluster.emu.list("batch/v1", "cronjobs", Some(&deploy_ns));
        (replicas(&deployment) == 1 && crons.first()?["spec"]["suspend"] == false).then_some(())
    })
    .await;

    // Right after the start no pod is ready: a call waits for one instead of failing.
    let started = Instant::now();
    let response = reqwest::get(format!("{}/fn/{ns}/hello", operator.base))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() >= Duration::from_secs(9), "did not wait");
    let reason = response.text().await.unwrap();
    assert!(reason.contains("no ready instance"), "{reason}");
    let (_, hello) = alice.get("functions/hello").await;
    assert_eq!(hello["instances"], 0, "no ready pod: {hello}");

    // Children deleted by hand come back.
    let cron_name = cluster.names("batch/v1", "cronjobs", &deploy_ns)[0].clone();
    let ingress_name = cluster.names("networking.k8s.io/v1", "ingresses", &deploy_ns)[0].clone();
    for (api_version, plural, name) in [
        ("apps/v1", "deployments", "hello"),
        ("v1", "services", "hello"),
        ("batch/v1", "cronjobs", cron_name.as_str()),
        ("networking.k8s.io/v1", "ingresses", ingress_name.as_str()),
    ] {
        cluster
            .emu
            .delete(api_version, plural, Some(&deploy_ns), name)
            .unwrap();
        let what = format!("{plural}/{name} back within 10 s");
        eventually_within(&operator, &what, Duration::from_secs(10), || {
            cluster.get(api_version, plural, &deploy_ns, name)
        })
        .await;
    }

    // FunctionJob: run 1 → Job → Succeeded with the log's last line; run 2 takes over,
    // run 1 stays in the run history the API serves from the status.
    let (status, body) = alice
        .post(
            "jobs",
            json!({"name": "once", "function_ref": "hello", "event_json": "{\"n\": 1}", "run_id": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run1 = run_job_name("once", 1);
    eventually(&operator, "the run Job", || {
        cluster.get("batch/v1", "jobs", &deploy_ns, &run1)
    })
    .await;
    cluster.job_pod_with_log(&deploy_ns, &run1, "handler started\n{\"n\": 1}\n");
    cluster.finish_job(&deploy_ns, &run1, true);
    let done = eventually(&operator, "the run Succeeded", || {
        cluster
            .get(FUNCTIONS, "functionjobs", &ns, "once")
            .filter(|j| j["status"]["phase"] == "Succeeded")
    })
    .await;
    assert_eq!(done["status"]["message"], "{\"n\": 1}");
    assert!(
        cluster
            .events(&ns)
            .iter()
            .any(|(n, r, _)| n == "once" && r == "RunSucceeded")
    );
    let (status, body) = alice.patch("jobs/once", json!({"run_id": 2})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run2 = run_job_name("once", 2);
    eventually(&operator, "run 2's Job, run 1's gone", || {
        cluster.get("batch/v1", "jobs", &deploy_ns, &run2)?;
        cluster
            .get("batch/v1", "jobs", &deploy_ns, &run1)
            .is_none()
            .then_some(())
    })
    .await;
    let runs = eventually(&operator, "run 2 in the history", || {
        let job = cluster.get(FUNCTIONS, "functionjobs", &ns, "once")?;
        (job["status"]["runs"].as_array()?.len() == 2).then_some(job)
    })
    .await;
    assert_eq!(runs["status"]["runs"][1]["message"], "{\"n\": 1}");
    let (status, run1_record) = alice.get("jobs/once/runs/1").await;
    assert_eq!(status, StatusCode::OK, "{run1_record}");
    assert!(
        run1_record["log_tail"]
            .as_str()
            .is_some_and(|t| t.contains("handler started")),
        "{run1_record}"
    );

    // A Service runs always on.
    alice
        .post(
            "services",
            json!({"name": "always", "runtime": "python3.11"}),
        )
        .await;
    let service_key = alice.upload("services", "always").await;
    let service_build = build_job_name("always", &service_key);
    eventually(&operator, "the Service's build", || {
        cluster.get("batch/v1", "jobs", &build_ns, &service_build)
    })
    .await;
    cluster.finish_job(&build_ns, &service_build, true);
    let deployment = eventually(&operator, "the always-on Deployment", || {
        cluster.get("apps/v1", "deployments", &deploy_ns, "always")
    })
    .await;
    assert_eq!(replicas(&deployment), 1);
    // Ready is the cluster's word: a crash-looping pod fails it with the kubelet's
    // reason, the Deployment's availability makes it Ready.
    let (_, body) = alice.get("services/always").await;
    assert_eq!(body["phase"], "Building", "{body}");
    cluster
        .emu
        .add_deployment_pod(
            &deploy_ns,
            "always",
            Some(kube_emulator::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 20s restarting failed container=function".into(),
                last_exit: Some("Error".into()),
            }),
        )
        .unwrap();
    let failed = eventually(
        &operator,
        "the Service Failed with CrashLoopBackOff",
        || {
            cluster
                .get(FUNCTIONS, "services", &ns, "always")
                .filter(|s| s["status"]["phase"] == "Failed")
        },
    )
    .await;
    let message = failed["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("CrashLoopBackOff: back-off 20s"),
        "{message}"
    );
    assert!(
        message.contains("last exit: Error (exit code 1)"),
        "{message}"
    );
    let (_, body) = alice.get("services/always").await;
    assert_eq!(body["message"], message, "the API shows the reason");
    cluster
        .emu
        .set_deployment_available(&deploy_ns, "always", 1)
        .unwrap();
    eventually(&operator, "the Service Ready once available", || {
        cluster
            .get(FUNCTIONS, "services", &ns, "always")
            .filter(|s| s["status"]["phase"] == "Ready")
    })
    .await;
    // Its instances are the Deployment's ready pods, as the routes' watch sees them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, always) = alice.get("services/always").await;
        if always["instances"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "instances never 1: {always}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The tenant's boundaries stand in its deploy namespace.
    for (api_version, plural, name) in [
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "sless-default-deny",
        ),
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "sless-data-plane",
        ),
        (
            "networking.k8s.io/v1",
            "networkpolicies",
            "always-workload-egress",
        ),
        ("v1", "resourcequotas", "sless-quota"),
        ("v1", "limitranges", "sless-limits"),
    ] {
        assert!(
            cluster.get(api_version, plural, &deploy_ns, name).is_some(),
            "{plural}/{name}"
        );
    }

    // A CR the schema refuses never reaches the controllers (kubectl apply gets 422).
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), &ns, &resource);
    let mut bad = DynamicObject::new("huge", &resource);
    bad.data = json!({"spec": {"runtime": "python3.11", "entrypoint": "handler.handle",
                               "memoryMb": 4294967296u64, "timeoutSec": 30}});
    let refused = functions
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("spec.memoryMb"),
                "{}",
                status.message
            );
        }
        other => panic!("{other}"),
    }

    // Delete → every child gone, the finalizer removed, the CR gone.
    assert_eq!(
        alice.delete("functions/hello").await,
        StatusCode::NO_CONTENT
    );
    eventually(&operator, "the function and its children gone", || {
        let gone = cluster.get(FUNCTIONS, "functions", &ns, "hello").is_none()
            && cluster
                .get("apps/v1", "deployments", &deploy_ns, "hello")
                .is_none()
            && cluster.get("v1", "services", &deploy_ns, "hello").is_none()
            && cluster.names("batch/v1", "cronjobs", &deploy_ns).is_empty()
            && cluster
                .names("networking.k8s.io/v1", "ingresses", &deploy_ns)
                .is_empty();
        gone.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() {
    let cluster = cluster().await;
    let first = cluster.operator("first", &["--components", "controllers"]);
    wait_ready(&first).await;
    let lease = eventually(&first, "the lease", || {
        cluster.get(
            "coordination.k8s.io/v1",
            "leases",
            "sless-system",
            "sless-operator",
        )
    })
    .await;
    assert!(lease["spec"]["holderIdentity"].is_string());
    let second = cluster.operator("second", &["--components", "controllers"]);
    // Every component serves its probes, controllers-only included.
    wait_ready(&second).await;

    // A Function applied as kubectl would: the leader builds it.
    let ns = "team-a";
    create_namespace(&cluster.client, ns).await;
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    let build_ns = build_namespace(ns);
    let job = apply_function(&functions, &resource, ns, "one").await;
    eventually(&first, "the leader's build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &job)
    })
    .await;
    let writes_by = |client: &str| {
        cluster
            .emu
            .requests()
            .iter()
            .filter(|r| r.client.as_deref() == Some(client) && r.is_write())
            .filter(|r| !r.path.contains("/leases"))
            .count()
    };
    assert!(writes_by("first") > 0);
    assert_eq!(writes_by("second"), 0, "the standby wrote");

    // The leader stops; the standby takes over within the lease duration.
    drop(first);
    let job = apply_function(&functions, &resource, ns, "two").await;
    eventually(&second, "the new leader's build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &job)
    })
    .await;
    assert!(writes_by("second") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_by_sigterm_releases_its_lease_at_once() {
    let cluster = cluster().await;
    // A long lease: a standby that had to wait for it to run out would take 30 s.
    let long_lease = [("SLESS_LEASE_DURATION_SECS", "30")];
    let controllers = ["--components", "controllers"];
    let mut first = cluster.operator_with_env("first", &controllers, &long_lease);
    wait_ready(&first).await;
    let holder = || {
        cluster
            .get(
                "coordination.k8s.io/v1",
                "leases",
                "sless-system",
                "sless-operator",
            )
            .and_then(|lease| lease["spec"]["holderIdentity"].as_str().map(String::from))
    };
    let first_holder = eventually(&first, "the first leader", holder).await;
    let second = cluster.operator_with_env("second", &controllers, &long_lease);
    wait_ready(&second).await;

    assert!(first.terminate().success(), "{}", first.log());
    // From when the leader is gone: its shutdown time is not the standby's.
    let stopped = Instant::now();
    assert!(first.log().contains("lease released"), "{}", first.log());
    // The standby tries every third of the lease (10 s); an unreleased lease would be
    // free only 20–30 s after the leader's last renewal.
    let second_holder = eventually_within(
        &second,
        "the standby leading",
        Duration::from_secs(15),
        || holder().filter(|h| *h != first_holder),
    )
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "took over after {:?} ({second_holder})",
        stopped.elapsed()
    );
}

#[test]
fn a_missing_or_unreachable_api_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = |kubeconfig: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_sless"))
            .args(["operator", "--listen", "127.0.0.1:0"])
            .env_clear()
            .env("HOME", dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env("SLESS_REGISTRY", "registry.test/sless")
            .env("SLESS_JWT_HS256_SECRET", SECRET)
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let stderr = run(&dir.path().join("missing"));
    assert!(
        stderr.contains("no Kubernetes configuration found"),
        "{stderr}"
    );

    let port = free_port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let stderr = run(&kubeconfig);
    assert!(
        stderr.contains(&format!(
            "cannot reach the Kubernetes API at http://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_cr_is_reported_and_never_blocks_its_neighbours() {
    let cluster = cluster().await;
    // A Function CRD of an older, looser version: no upper bound on memoryMb.
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let name = "functions.sless.kube5s.ru";
    let mut crd = serde_json::to_value(crds.get(name).await.unwrap()).unwrap();
    let memory = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["memoryMb"];
    memory.as_object_mut().unwrap().remove("maximum");
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .unwrap();

    let ns = "team-b";
    create_namespace(&cluster.client, ns).await;
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    // What the operator's types cannot hold (memoryMb is a u32), left from before.
    let mut huge = DynamicObject::new("huge", &resource);
    huge.data = json!({"spec": {"runtime": "python3.11", "entrypoint": "handler.handle",
        "memoryMb": 4294967296u64, "timeoutSec": 30, "s3Key": "contexts/team-b/huge/1.tar.gz"}});
    functions
        .create(&PostParams::default(), &huge)
        .await
        .unwrap();
    let fine = apply_function(&functions, &resource, ns, "fine").await;

    let operator = cluster.operator("operator", &[]);
    wait_ready(&operator).await;
    eventually(&operator, "the neighbour's build Job", || {
        cluster.get("batch/v1", "jobs", &build_namespace(ns), &fine)
    })
    .await;
    let status = eventually(&operator, "the unreadable object's status", || {
        let object = cluster.get(FUNCTIONS, "functions", ns, "huge")?;
        (object["status"]["phase"] == "Failed").then(|| object["status"].clone())
    })
    .await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("cannot be read by the operator"),
        "{message}"
    );
    assert_eq!(status["conditions"][0]["status"], "False");
    let response = reqwest::get(format!("{}/fn/{ns}/huge", operator.base))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let reason = response.text().await.unwrap();
    assert!(reason.contains("cannot be read"), "{reason}");
}
