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

use common::authz::{Admission, Need, Rbac, Write, assert_authorized, install_documents};
use common::kube_cluster::{
    Cluster, FUNCTIONS, Operator, SECRET, TRIGGER_KEY, apply_function, apply_trigger, cluster,
    create_namespace, eventually, eventually_within, free_port, triggers, wait_ready,
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

/// `sless token <args>` with the cluster's HS256 secret: the token, or the error.
fn cli_token(args: &[&str]) -> Result<String, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_sless"))
        .arg("token")
        .args(args)
        .env("SLESS_JWT_HS256_SECRET", SECRET)
        .env("SLESS_DATA_DIR", "/nonexistent")
        .output()
        .unwrap();
    match output.status.success() {
        true => Ok(String::from_utf8(output.stdout).unwrap().trim().to_string()),
        false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

/// The `FROM` of the Dockerfile in the build context stored at `key`.
fn context_base_image(cluster: &Cluster, key: &str) -> String {
    let stored = std::fs::File::open(cluster.dir.path().join("s3/sless").join(key)).unwrap();
    let mut context = tar::Archive::new(flate2::read::GzDecoder::new(stored));
    let mut dockerfile = context
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|entry| entry.path().unwrap().to_str() == Some("Dockerfile"))
        .expect("the context has a Dockerfile");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut dockerfile, &mut text).unwrap();
    let from = text.lines().find_map(|line| line.strip_prefix("FROM "));
    from.expect("the Dockerfile starts FROM a base image")
        .to_string()
}

fn replicas(deployment: &Value) -> i64 {
    deployment["spec"]["replicas"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_runs_every_flow_against_an_api_server_over_http() {
    let cluster = cluster().await;
    // The registry credential, copied into the tenant's namespaces where the operator
    // has bound itself the secrets role.
    let credential = json!({"apiVersion": "v1", "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred", "namespace": "sless-system"},
        "data": {".dockerconfigjson": "e30="}});
    cluster.emu.create("v1", "secrets", credential).unwrap();
    // The two components as the install runs them, each under its own account.
    let operator = cluster.operator_with_env(
        "operator",
        &["--components", "controllers"],
        &[("SLESS_REGISTRY_SECRET", "regcred")],
    );
    let api = cluster.operator("api", &["--components", "api"]);
    wait_ready(&operator).await;
    wait_ready(&api).await;
    let alice = User::new(&api, "alice");
    // `sless token` signs with the secret the operator verifies with (docs/kubernetes.md).
    let mut bob = User::new(&api, "bob");
    bob.token = cli_token(&["--sub", "bob"]).unwrap();
    let (status, body) = bob.get("functions").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let refused = cli_token(&["--admin"]).unwrap_err();
    assert!(
        refused.starts_with("error: ") && refused.contains("SLESS_ADMIN_SUBJECTS"),
        "{refused}"
    );
    let ns = alice.ns.clone();
    // The console's first call makes the user's namespace.
    let (status, body) = alice.post("ensure", json!({})).await;
    assert!(status.is_success(), "{status} {body}");
    // NetworkPolicy knows no host names: an egress list naming one is refused up front.
    let named =
        json!({"name": "named", "runtime": "python3.11", "egress": ["api.example.com:443"]});
    let (status, body) = alice.post("functions", named).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("api.example.com:443") && message.contains("NetworkPolicy"),
        "{body}"
    );
    let addressed =
        json!({"name": "addressed", "runtime": "python3.11", "egress": ["10.1.2.3/32:443"]});
    let (status, body) = alice.post("functions", addressed).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        alice.delete("functions/addressed").await,
        StatusCode::NO_CONTENT
    );
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
    // Without SLESS_BASE_IMAGE_PREFIX the base images are looked for in the registry,
    // where scripts/images pushes them.
    assert_eq!(
        context_base_image(&cluster, &key),
        "registry.test/sless/runtime-python3.11:v0.1.0"
    );
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
    // Build pods reach the DNS, S3 (an address here) and the registry (a name: any
    // public address, on its port only); the install steps, the function's egress.
    let boundary = cluster
        .get(
            "networking.k8s.io/v1",
            "networkpolicies",
            &build_ns,
            "sless-build",
        )
        .unwrap();
    let rules = boundary["spec"]["egress"].as_array().unwrap();
    let s3_port = cluster
        .s3
        .config("sless")
        .endpoint
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert_eq!(rules[1]["to"][0]["ipBlock"]["cidr"], "127.0.0.1/32");
    assert_eq!(rules[1]["ports"][0]["port"], s3_port);
    assert_eq!(
        rules[2]["to"][0]["ipBlock"]["except"],
        json!(["169.254.169.254/32"])
    );
    assert_eq!(rules[2]["ports"][0]["port"], 443);
    assert_eq!(
        rules.len(),
        3,
        "one rule for the registry of pushes and bases"
    );
    assert!(
        cluster
            .get(
                "networking.k8s.io/v1",
                "networkpolicies",
                &build_ns,
                "hello-function-build-egress",
            )
            .is_some()
    );
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
    // Its statuses were written without reading it first: the conditions whose
    // transition times a write keeps come from the controller's own watch.
    let reads = cluster
        .emu
        .requests()
        .iter()
        .filter(|r| r.client.as_deref() == Some("operator") && r.method == "GET")
        .filter(|r| {
            r.path
                .ends_with(&format!("/namespaces/{ns}/functions/hello"))
        })
        .count();
    assert_eq!(reads, 0, "the function was read before a status write");
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
    let response = reqwest::get(format!("{}/fn/{ns}/hello", api.base))
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

    for namespace in [&deploy_ns, &build_ns] {
        assert!(
            cluster.get("v1", "secrets", namespace, "regcred").is_some(),
            "the registry secret's copy in {namespace}"
        );
        let binding = cluster
            .get(
                "rbac.authorization.k8s.io/v1",
                "rolebindings",
                namespace,
                "sless-operator-secrets",
            )
            .unwrap_or_else(|| panic!("the secrets role binding in {namespace}"));
        assert_eq!(binding["roleRef"]["name"], "sless-operator-secrets");
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

    // Every request of each component is one a real API server lets through: allowed by
    // the roles of its account (and the RoleBindings the controllers made), admitted by
    // the policies that keep their writes to the namespaces sless made.
    let data_plane = assert_authorized(&cluster.emu, "api", &["rbac.yaml"], "sless-api");
    for (resource, verb) in [
        ("functions", "create"),
        ("functions/status", "patch"),
        ("namespaces", "create"),
        ("deployments", "watch"),
    ] {
        assert!(
            data_plane
                .iter()
                .any(|n| n.resource == resource && n.verb == verb),
            "no data-plane {resource} {verb} among the checked requests"
        );
    }
    let needs = assert_authorized(&cluster.emu, "operator", &["rbac.yaml"], "sless-operator");
    for (resource, verb) in [
        ("secrets", "patch"),
        ("rolebindings", "patch"),
        ("deployments", "patch"),
    ] {
        assert!(
            needs
                .iter()
                .any(|n| n.resource == resource && n.verb == verb),
            "no {resource} {verb} among the checked requests"
        );
    }
}

/// What the API server's authorizer would decide, under the shipped RBAC, for the
/// data plane's account and the controllers'.
#[test]
fn the_data_plane_account_cannot_do_what_only_the_controllers_do() {
    let documents = install_documents("rbac.yaml");
    let account = |name: &str| Rbac::of(&documents, &[], "sless-system", name);
    let (data_plane, controllers) = (account("sless-api"), account("sless-operator"));
    let need =
        |group: &str, resource: &str, verb: &str, namespace: &str, name: Option<&str>| Need {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: Some(namespace.into()),
            name: name.map(Into::into),
        };
    let deploy_ns = deploy_namespace("team-a");
    for only_controllers in [
        need("apps", "deployments", "create", &deploy_ns, None),
        need("apps", "deployments", "patch", &deploy_ns, Some("hello")),
        need("", "namespaces", "patch", "team-a", Some("team-a")),
        need("batch", "jobs", "create", &build_namespace("team-a"), None),
        need(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "create",
            &deploy_ns,
            None,
        ),
        need("", "secrets", "get", "sless-system", Some("regcred")),
    ] {
        assert!(
            controllers.allows(&only_controllers),
            "{only_controllers:?}"
        );
        assert!(
            !data_plane.allows(&only_controllers),
            "{only_controllers:?}"
        );
    }
    // Leases: RBAC cannot name a pod's load Lease, so both may update Leases there; the
    // admission policy keeps the data plane to its own (sless-load-*), never the lease
    // the controllers lead by.
    let admission = Admission::shipped();
    let lease_write = |name: &str| Write {
        username: "system:serviceaccount:sless-system:sless-api".into(),
        operation: "UPDATE",
        group: "coordination.k8s.io".into(),
        resource: "leases".into(),
        sub_resource: String::new(),
        namespace: Some("sless-system".into()),
        object: json!({"metadata": {"name": name}}),
        old_object: json!({"metadata": {"name": name}}),
        namespace_object: namespace_object("sless-system", json!({})),
    };
    assert!(admission.review(&lease_write("sless-operator")).is_err());
    assert_eq!(admission.review(&lease_write("sless-load-api-0")), Ok(()));
    for both in [
        need(
            "coordination.k8s.io",
            "leases",
            "update",
            "sless-system",
            Some("sless-load-api-0"),
        ),
        need("sless.kube5s.ru", "functions", "create", "team-a", None),
        need("", "namespaces", "create", "team-a", None),
        need("apps", "deployments", "watch", &deploy_ns, None),
    ] {
        assert!(
            controllers.allows(&both) && data_plane.allows(&both),
            "{both:?}"
        );
    }
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

    // Built and triggered, it is deployed with one replica; the reconciles read its
    // triggers from the watch cache: the only trigger lists are the watches' own.
    cluster.finish_job(&build_ns, &job, true);
    apply_trigger(
        &cluster,
        ns,
        "web",
        json!({"type": "http", "functionRef": "one"}),
    )
    .await;
    eventually(&first, "one replica for the trigger", || {
        cluster
            .get("apps/v1", "deployments", &deploy_namespace(ns), "one")
            .filter(|d| d["spec"]["replicas"] == 1)
    })
    .await;
    let namespaced_trigger_lists = cluster
        .emu
        .requests()
        .iter()
        .filter(|r| r.client.as_deref() == Some("first") && r.method == "GET")
        .filter(|r| r.path.ends_with(&format!("/namespaces/{ns}/triggers")))
        .count();
    assert_eq!(namespaced_trigger_lists, 0, "reconciles listed triggers");

    // The leader stops; the standby takes over within the lease duration.
    drop(first);
    let job = apply_function(&functions, &resource, ns, "two").await;
    // The lease runs out (15 s), then the new leader's watches start and build.
    eventually_within(
        &second,
        "the new leader's build Job",
        Duration::from_secs(40),
        || cluster.get("batch/v1", "jobs", &build_ns, &job),
    )
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
    let run_with_key = |kubeconfig: &Path, trigger_key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sless"));
        command
            .args(["operator", "--listen", "127.0.0.1:0"])
            .env_clear()
            .env("HOME", dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env("SLESS_REGISTRY", "registry.test/sless")
            .env("SLESS_JWT_HS256_SECRET", SECRET);
        if let Some(key) = trigger_key {
            command.env("SLESS_TRIGGER_KEY", key);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let run = |kubeconfig: &Path| run_with_key(kubeconfig, Some(TRIGGER_KEY));
    // Cron fires cannot be proven to /fn without the install's key.
    let stderr = run_with_key(&dir.path().join("missing"), None);
    assert!(stderr.contains("set SLESS_TRIGGER_KEY"), "{stderr}");
    let stderr = run_with_key(&dir.path().join("missing"), Some("short"));
    assert!(stderr.contains("at least 16 bytes"), "{stderr}");
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

/// A write by the operator's service account, for the admission policies.
fn operator_write(
    operation: &'static str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> Write {
    Write {
        username: "system:serviceaccount:sless-system:sless-operator".into(),
        operation,
        group: group.into(),
        resource: resource.into(),
        sub_resource: String::new(),
        namespace: namespace.map(str::to_string),
        object: json!({"metadata": {"name": "x"}}),
        old_object: Value::Null,
        namespace_object: Value::Null,
    }
}

fn namespace_object(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}})
}

/// The shipped admission policies refuse what RBAC alone would let a compromised
/// operator do: write outside the namespaces sless made, bind itself another role,
/// take over or relabel a namespace it did not make.
#[test]
fn the_admission_policies_keep_the_operator_in_its_own_namespaces() {
    let admission = Admission::shipped();
    let ours = namespace_object(
        "sless-fn-sless-ab",
        json!({"app.kubernetes.io/managed-by": "sless"}),
    );
    let theirs = namespace_object(
        "kube-system",
        json!({"kubernetes.io/metadata.name": "kube-system"}),
    );

    let mut deployment = operator_write("CREATE", "apps", "deployments", Some("sless-fn-sless-ab"));
    deployment.namespace_object = ours.clone();
    assert_eq!(admission.review(&deployment), Ok(()));
    deployment.namespace_object = theirs.clone();
    deployment.namespace = Some("kube-system".into());
    let denied = admission.review(&deployment).unwrap_err();
    assert!(denied.contains("sless-operator-writes"), "{denied}");
    let mut unlabelled = operator_write("UPDATE", "", "secrets", Some("default"));
    unlabelled.namespace_object = json!({"metadata": {"name": "default"}});
    assert!(
        admission.review(&unlabelled).is_err(),
        "a namespace without labels"
    );
    // Someone else's writes are not the policies' business.
    deployment.username = "system:serviceaccount:kube-system:deployment-controller".into();
    assert_eq!(admission.review(&deployment), Ok(()));

    let mut binding = operator_write(
        "CREATE",
        "rbac.authorization.k8s.io",
        "rolebindings",
        Some("sless-fn-sless-ab"),
    );
    binding.namespace_object = ours.clone();
    binding.object = json!({"metadata": {"name": "b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sless-operator-secrets"}});
    assert_eq!(admission.review(&binding), Ok(()));
    binding.object["roleRef"]["name"] = json!("cluster-admin");
    let denied = admission.review(&binding).unwrap_err();
    assert!(denied.contains("no other role"), "{denied}");

    let labelled = |name: &str, extra: Value| {
        let mut labels = json!({"app.kubernetes.io/managed-by": "sless"});
        labels
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        namespace_object(name, labels)
    };
    let privileged = json!({"pod-security.kubernetes.io/enforce": "privileged"});
    let mut namespace = operator_write("CREATE", "", "namespaces", None);
    namespace.object = labelled("sless-build-sless-ab", privileged.clone());
    assert_eq!(admission.review(&namespace), Ok(()));
    namespace.object = labelled("sless-fn-sless-ab", privileged.clone());
    let denied = admission.review(&namespace).unwrap_err();
    assert!(denied.contains("only build namespaces"), "{denied}");
    namespace.object = namespace_object("sless-x", json!({}));
    assert!(
        admission.review(&namespace).is_err(),
        "a namespace without sless's label"
    );
    // Taking over a namespace that exists: adding the label is not enough.
    namespace.operation = "UPDATE";
    namespace.object = labelled("default", json!({}));
    namespace.old_object = json!({"metadata": {"name": "default"}});
    let denied = admission.review(&namespace).unwrap_err();
    assert!(denied.contains("only the namespaces it made"), "{denied}");
    namespace.old_object = labelled("default", json!({}));
    assert_eq!(admission.review(&namespace), Ok(()));
}

/// Every resource the operator's ClusterRole may write is one the policies watch: a
/// rule added to rbac.yaml without its policy line fails here.
#[test]
fn the_admission_policies_cover_every_write_the_cluster_role_grants() {
    let admission = Admission::shipped();
    let documents = install_documents("rbac.yaml");
    let role = documents
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "sless-operator")
        .unwrap();
    let writes = ["create", "update", "patch", "delete", "deletecollection"];
    for rule in role["rules"].as_array().unwrap() {
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        if !verbs.iter().any(|v| writes.contains(v)) {
            continue;
        }
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                let (group, resource) = (group.as_str().unwrap(), resource.as_str().unwrap());
                assert!(
                    admission.covers(group, resource),
                    "the operator may write {group}/{resource}, which no admission policy watches"
                );
            }
        }
    }
    // Secrets only through the role it binds in its own namespaces.
    assert!(
        !role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "secrets")
                && r["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "patch" || v == "create")),
        "a cluster-wide Secret write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fn_keeps_answering_through_a_30_s_api_server_outage() {
    let cluster = cluster().await;
    let ns = "team-o";
    create_namespace(&cluster.client, ns).await;
    let deploy_ns = deploy_namespace(ns);
    let build_ns = build_namespace(ns);
    // The function's pod: a local server the data plane reaches for its Service.
    let pod = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pod_address = pod.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { "hello from the pod" });
    tokio::spawn(async move { axum::serve(pod, app).await.unwrap() });
    let authority = operator::names::service_authority(ns, "hello", "cluster.local");
    let controllers = cluster.operator("controllers", &["--components", "controllers"]);
    let data_plane = cluster.operator_with_env(
        "api",
        &["--components", "api"],
        &[("SLESS_CONNECT_TO", &format!("{authority}={pod_address}"))],
    );
    wait_ready(&controllers).await;
    wait_ready(&data_plane).await;

    // A built function with an http trigger and a ready pod.
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    let build = apply_function(&functions, &resource, ns, "hello").await;
    eventually(&controllers, "the build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &build)
    })
    .await;
    cluster.finish_job(&build_ns, &build, true);
    apply_trigger(
        &cluster,
        ns,
        "web",
        json!({"type": "http", "functionRef": "hello"}),
    )
    .await;
    eventually(&controllers, "one replica for the trigger", || {
        cluster
            .get("apps/v1", "deployments", &deploy_ns, "hello")
            .filter(|d| d["spec"]["replicas"] == 1)
    })
    .await;
    let ready = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1});
    let deployments = ("apps/v1", "deployments", Some(deploy_ns.as_str()), "hello");
    cluster
        .emu
        .update_status(
            deployments.0,
            deployments.1,
            deployments.2,
            deployments.3,
            ready,
        )
        .unwrap();
    let http = reqwest::Client::new();
    let call = || async {
        let response = http
            .get(format!("{}/fn/{ns}/hello", data_plane.base))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    };
    let answered = |result: &Result<(StatusCode, String), String>| matches!(result, Ok((StatusCode::OK, body)) if body == "hello from the pod");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !answered(&call().await) {
        assert!(
            Instant::now() < deadline,
            "/fn never answered: {}",
            data_plane.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The API server goes away for 30 s: every call in that time still answers from the
    // routes the data plane last saw.
    cluster.emu.set_down(true);
    let outage = Instant::now();
    let mut calls = 0;
    while outage.elapsed() < Duration::from_secs(30) {
        let result = call().await;
        assert!(
            answered(&result),
            "after {:?} of outage: {result:?}\n{}",
            outage.elapsed(),
            data_plane.log()
        );
        calls += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(calls >= 20, "only {calls} calls in the outage");
    let refused = cluster
        .emu
        .requests()
        .iter()
        .filter(|r| r.status == 503)
        .count();
    assert!(refused > 0, "the data plane never noticed the outage");

    // Back: the data plane follows changes again (a disabled trigger stops the calls).
    cluster.emu.set_down(false);
    let patch = json!({"spec": {"enabled": false}});
    triggers(&cluster, ns)
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while answered(&call().await) {
        assert!(
            Instant::now() < deadline,
            "the disabled trigger was not seen after the outage: {}",
            data_plane.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The environment the kubelet gives the cron pod's container, and its args with
/// `$(VAR)` expanded from it, as the kubelet does.
fn cron_pod_args(cluster: &Cluster, deploy_ns: &str, cron: &str) -> Vec<String> {
    use base64::Engine as _;
    let cron = cluster
        .get("batch/v1", "cronjobs", deploy_ns, cron)
        .unwrap();
    let container = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for variable in container["env"].as_array().unwrap() {
        let from = &variable["valueFrom"]["secretKeyRef"];
        let secret = cluster
            .get("v1", "secrets", deploy_ns, from["name"].as_str().unwrap())
            .expect("the Secret the cron pod mounts");
        let encoded = secret["data"][from["key"].as_str().unwrap()]
            .as_str()
            .unwrap();
        let value = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let reference = format!("$({})", variable["name"].as_str().unwrap());
        for arg in &mut args {
            *arg = arg.replace(&reference, std::str::from_utf8(&value).unwrap());
        }
    }
    args
}

/// curl with a cron pod's args, the data plane's Service name dialled at `data_plane`.
fn curl(args: &[String], data_plane: &str) -> std::process::Output {
    let address = data_plane.trim_start_matches("http://");
    Command::new("curl")
        .args([
            "--connect-to",
            &format!("sless-operator.sless-system.svc.cluster.local:8080:{address}"),
        ])
        .args(args)
        .output()
        .expect("curl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_fires_and_job_runs_are_call_records_of_the_data_plane() {
    let cluster = cluster().await;
    let ns = namespace_for_sub("carol");
    create_namespace(&cluster.client, &ns).await;
    let deploy_ns = deploy_namespace(&ns);
    let build_ns = build_namespace(&ns);
    // The function's pod: answers and keeps the headers it was sent.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<axum::http::HeaderMap>::new()));
    let pod = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pod_address = pod.local_addr().unwrap();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let kept = kept.clone();
        async move {
            kept.lock().unwrap().push(headers);
            "tick handled"
        }
    });
    tokio::spawn(async move { axum::serve(pod, app).await.unwrap() });
    let authority = operator::names::service_authority(&ns, "hello", "cluster.local");
    let connect_to = format!("{authority}={pod_address}");
    let controllers = cluster.operator("controllers", &["--components", "controllers"]);
    let data_plane = cluster.operator_with_env(
        "api",
        &["--components", "api"],
        &[("SLESS_CONNECT_TO", &connect_to)],
    );
    wait_ready(&controllers).await;
    wait_ready(&data_plane).await;
    let carol = User::new(&data_plane, "carol");

    // A built function whose only trigger is a cron trigger: hidden from the public.
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), &ns, &resource);
    let build = apply_function(&functions, &resource, &ns, "hello").await;
    eventually(&controllers, "the build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &build)
    })
    .await;
    cluster.finish_job(&build_ns, &build, true);
    apply_trigger(
        &cluster,
        &ns,
        "tick",
        json!({"type": "cron", "functionRef": "hello", "schedule": "*/5 * * * *"}),
    )
    .await;
    let cron = eventually(&controllers, "the CronJob", || {
        cluster.get("batch/v1", "cronjobs", &deploy_ns, "tick")
    })
    .await;
    eventually(&controllers, "one replica", || {
        cluster
            .get("apps/v1", "deployments", &deploy_ns, "hello")
            .filter(|d| d["spec"]["replicas"] == 1)
    })
    .await;
    cluster
        .emu
        .set_deployment_available(&deploy_ns, "hello", 1)
        .unwrap();
    // The cron pods may reach the data plane and nothing else.
    let egress = cluster
        .get(
            "networking.k8s.io/v1",
            "networkpolicies",
            &deploy_ns,
            "sless-cron-egress",
        )
        .unwrap();
    assert_eq!(
        egress["spec"]["egress"][1]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "sless-api"
    );

    // The CronJob's pod, as the kubelet runs it: curl with its args and its Secret.
    let args = cron_pod_args(&cluster, &deploy_ns, "tick");
    let deadline = Instant::now() + Duration::from_secs(30);
    let fired = loop {
        let output = curl(&args, &data_plane.base);
        if output.status.success() {
            break output;
        }
        assert!(
            Instant::now() < deadline,
            "the cron call never succeeded: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            data_plane.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(String::from_utf8_lossy(&fired.stdout), "tick handled");
    let (status, body) = carol.get("functions/hello/invocations?trigger=cron").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let record = &body["invocations"][0];
    assert_eq!(
        (
            &record["trigger"],
            &record["trigger_name"],
            &record["status"]
        ),
        (&json!("cron"), &json!("tick"), &json!(200)),
        "{body}"
    );
    // The token proves the call to sless; the function never sees it.
    let headers = seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        headers.get("x-sless-trigger-token").is_none(),
        "{headers:?}"
    );

    // The same call without the token, or with another tenant's, is a public call: the
    // function has no http trigger, so it is refused, and no cron record is made.
    let token = cron_pod_args(&cluster, &deploy_ns, "tick")
        .into_iter()
        .find(|a| a.starts_with("x-sless-trigger-token: "))
        .unwrap();
    let other_key = sless_core::auth::TriggerKey::new(TRIGGER_KEY).unwrap();
    let other = format!(
        "x-sless-trigger-token: {}",
        other_key.token(&namespace_for_sub("mallory"))
    );
    for forged in [None, Some(other.as_str())] {
        let mut args: Vec<String> = args.iter().filter(|a| **a != token).cloned().collect();
        if let Some(header) = forged {
            args.splice(0..0, ["-H".to_string(), header.to_string()]);
        }
        let output = curl(&args, &data_plane.base);
        assert!(!output.status.success(), "{forged:?} was let through");
    }
    let (_, body) = carol.get("functions/hello/invocations").await;
    let records = body["invocations"].as_array().unwrap();
    assert_eq!(records.len(), 3, "{body}");
    assert!(
        records[..2].iter().all(|r| r["trigger"] == "http"
            && r["status"] == 503
            && r.get("trigger_name").is_none()),
        "{body}"
    );
    assert_eq!(cron["spec"]["suspend"], false);

    // Job runs: made by the controllers, recorded by the data plane from the runs'
    // status, with their request id, version and outcome.
    let (status, body) = carol
        .post(
            "jobs",
            json!({"name": "nightly", "function_ref": "hello", "event_json": "{}", "run_id": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (run_id, succeeded) in [(1, true), (2, false)] {
        if run_id > 1 {
            let (status, body) = carol.patch("jobs/nightly", json!({"run_id": run_id})).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        let run = run_job_name("nightly", run_id);
        eventually(&controllers, "the run Job", || {
            cluster.get("batch/v1", "jobs", &deploy_ns, &run)
        })
        .await;
        cluster.job_pod_with_log(&deploy_ns, &run, "{\"ok\": true}\n");
        cluster.finish_job(&deploy_ns, &run, succeeded);
        eventually(&controllers, "the run's end in the status", || {
            let job = cluster.get(FUNCTIONS, "functionjobs", &ns, "nightly")?;
            (job["status"]["observedRunId"] == run_id
                && ["Succeeded", "Failed"].contains(&job["status"]["phase"].as_str()?))
            .then_some(())
        })
        .await;
    }
    let job = cluster
        .get(FUNCTIONS, "functionjobs", &ns, "nightly")
        .unwrap();
    let runs = job["status"]["runs"].as_array().unwrap().clone();
    let version = sless_api::keys::version_of(&format!("contexts/{ns}/hello/1.tar.gz")).to_string();
    let expected = |records: &Value| {
        let records = records["invocations"].as_array()?;
        (records.len() == 2).then_some(())?;
        for (record, run) in records.iter().zip(&runs) {
            assert_eq!(record["request_id"], run["requestId"], "{records:?}");
            assert_eq!(record["trigger_name"], "nightly");
            assert_eq!(record["version"], version.as_str());
            assert_eq!(record["duration_ms"].as_f64(), run["durationMs"].as_f64());
        }
        let statuses: Vec<&Value> = records.iter().map(|r| &r["status"]).collect();
        assert_eq!(statuses, [&json!(500), &json!(200)], "newest first");
        Some(())
    };
    job_records_appear(&carol, || data_plane.log(), &expected).await;
    // Another replica of the data plane (or this one restarted) has them too.
    let second = cluster.operator_with_env("api-2", &["--components", "api"], &[]);
    wait_ready(&second).await;
    let carol = User::new(&second, "carol");
    job_records_appear(&carol, || second.log(), &expected).await;
}

/// Waits up to 15 s for `user`'s job records of `hello` to be what `expected` accepts.
async fn job_records_appear(
    user: &User,
    log: impl Fn() -> String,
    expected: &impl Fn(&Value) -> Option<()>,
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, body) = user.get("functions/hello/invocations?trigger=job").await;
        if expected(&body).is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "job records: {body}\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_builder_needs_no_privileged_namespace() {
    let cluster = cluster().await;
    let ns = "team-b";
    create_namespace(&cluster.client, ns).await;
    let build_ns = build_namespace(ns);
    let credential = json!({"apiVersion": "v1", "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred", "namespace": "sless-system"},
        "data": {".dockerconfigjson": "e30="}});
    cluster.emu.create("v1", "secrets", credential).unwrap();
    let controllers = cluster.operator_with_env(
        "controllers",
        &["--components", "controllers"],
        &[
            ("SLESS_BUILDKIT_ADDR", "tcp://buildkitd.buildkit.svc:1234"),
            ("SLESS_BUILD_USER_NAMESPACES", "true"),
            ("SLESS_REGISTRY_SECRET", "regcred"),
        ],
    );
    wait_ready(&controllers).await;
    let resource = ApiResource::erase::<sless_core::model::Function>(&());
    let functions: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
    let build = apply_function(&functions, &resource, ns, "hello").await;
    let job = eventually(&controllers, "the build Job", || {
        cluster.get("batch/v1", "jobs", &build_ns, &build)
    })
    .await;
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["hostUsers"], false);
    let step = &pod["initContainers"][1];
    assert_eq!(
        step["command"],
        json!(["buildctl", "--addr", "tcp://buildkitd.buildkit.svc:1234"])
    );
    assert_eq!(step["securityContext"]["allowPrivilegeEscalation"], false);
    let namespace = cluster
        .emu
        .get("v1", "namespaces", None, &build_ns)
        .unwrap();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    // The push step still has its credential there.
    assert!(cluster.get("v1", "secrets", &build_ns, "regcred").is_some());
    // The daemon is reached in its namespace, on its port.
    let boundary = cluster
        .get(
            "networking.k8s.io/v1",
            "networkpolicies",
            &build_ns,
            "sless-build",
        )
        .unwrap();
    let daemon = boundary["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == 1234)
        .expect("a rule for the daemon");
    assert_eq!(
        daemon["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "buildkit"
    );
}
