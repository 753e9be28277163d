//! The shipped `sless operator` against a Kubernetes API served over HTTP on loopback
//! (the `kube-emulator` crate) and a real S3 endpoint: the cluster side of the binary's
//! Kubernetes tests.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use kube_emulator::Emulator;
use operator::names::build_job_name;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sless_embedded::s3::EmbeddedS3;

pub const SECRET: &str = "kube-operator-test-secret-0123456789abcdef";
/// The install's `SLESS_TRIGGER_KEY`.
pub const TRIGGER_KEY: &str = "kube-operator-test-trigger-key-0123456789";
pub const FUNCTIONS: &str = "sless.kube5s.ru/v1alpha1";

/// A running `sless operator`; killed when dropped. Its log is kept in a file and
/// printed when a wait times out.
pub struct Operator {
    child: Child,
    pub base: String,
    log: PathBuf,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as Kubernetes stops a pod, then waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: a plain signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.child.wait().unwrap()
    }
}

pub struct Cluster {
    pub emu: Emulator,
    pub client: Client,
    pub s3: EmbeddedS3,
    pub dir: tempfile::TempDir,
}

pub async fn create_namespace(client: &Client, name: &str) {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub async fn cluster() -> Cluster {
    // The test's own kube client needs a provider, as the binary installs one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (emu, addr) = Emulator::start().await.unwrap();
    let client =
        Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
    // What the install manifests make: the operator's namespace and the CRDs.
    create_namespace(&client, "sless-system").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in operator::crds::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let s3 = EmbeddedS3::start(&dir.path().join("s3"), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    Cluster {
        emu,
        client,
        s3,
        dir,
    }
}

impl Cluster {
    /// Starts `sless operator` with `args` and the settings every component of these
    /// tests shares; `client` names its requests in the emulator's log.
    pub fn operator(&self, client: &str, args: &[&str]) -> Operator {
        self.operator_with_env(client, args, &[])
    }

    /// [`Cluster::operator`] with more environment variables.
    pub fn operator_with_env(
        &self,
        client: &str,
        args: &[&str],
        more: &[(&str, &str)],
    ) -> Operator {
        let s3 = self.s3.config("sless");
        let env = [
            ("SLESS_REGISTRY", "registry.test/sless".to_string()),
            ("SLESS_JWT_HS256_SECRET", SECRET.to_string()),
            ("SLESS_TRIGGER_KEY", TRIGGER_KEY.to_string()),
            ("SLESS_INGRESS_HOST", "fn.test".to_string()),
            ("SLESS_LEASE_DURATION_SECS", "2".to_string()),
            ("SLESS_S3_ENDPOINT", s3.endpoint.unwrap()),
            ("SLESS_S3_ACCESS_KEY_ID", s3.access_key_id.unwrap()),
            ("SLESS_S3_SECRET_ACCESS_KEY", s3.secret_access_key.unwrap()),
            ("SLESS_LOG", "info,kube=warn".to_string()),
        ];
        let more = more.iter().map(|(k, v)| (*k, v.to_string()));
        self.spawn(client, args, env.into_iter().chain(more))
    }

    /// Starts `sless operator` with `args` and only `env` (and a kubeconfig), listening
    /// on a free loopback port.
    pub fn spawn<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &self,
        client: &str,
        args: &[&str],
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Operator {
        let kubeconfig = self.dir.path().join(format!("kubeconfig-{client}"));
        std::fs::write(&kubeconfig, self.emu.kubeconfig_yaml_for(client)).unwrap();
        let log = self.dir.path().join(format!("operator-{client}.log"));
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_sless"))
            .arg("operator")
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("KUBECONFIG", &kubeconfig)
            .envs(env)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start sless operator");
        Operator {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    pub fn get(&self, api_version: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.emu.get(api_version, plural, Some(ns), name)
    }

    pub fn names(&self, api_version: &str, plural: &str, ns: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .emu
            .list(api_version, plural, Some(ns))
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    /// What the Job controller writes when a Job's pod ends.
    pub fn finish_job(&self, ns: &str, job: &str, succeeded: bool) {
        let status = if succeeded {
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
        } else {
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                   "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
        };
        self.emu
            .update_status("batch/v1", "jobs", Some(ns), job, status)
            .unwrap();
    }

    /// What the Job controller and the kubelet make: a pod of the Job, with a log.
    pub fn job_pod_with_log(&self, ns: &str, job: &str, log: &str) {
        let pod = format!("{job}-pod");
        self.emu
            .create(
                "v1",
                "pods",
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "namespace": ns,
                                 "labels": {"batch.kubernetes.io/job-name": job}},
                    "spec": {"containers": [{"name": "main", "image": "x"}]},
                }),
            )
            .unwrap();
        self.emu.set_pod_log(ns, &pod, log);
    }

    pub fn events(&self, ns: &str) -> Vec<(String, String, String)> {
        self.emu
            .list("events.k8s.io/v1", "events", Some(ns))
            .iter()
            .map(|e| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&e["regarding"]["name"]),
                    text(&e["reason"]),
                    text(&e["type"]),
                )
            })
            .collect()
    }
}

pub async fn eventually<T>(operator: &Operator, what: &str, check: impl FnMut() -> Option<T>) -> T {
    eventually_within(operator, what, Duration::from_secs(15), check).await
}

pub async fn eventually_within<T>(
    operator: &Operator,
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(found) = check() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "timed out waiting for {what}; operator log:\n{}",
        operator.log()
    );
}

pub async fn wait_ready(operator: &Operator) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = http.get(format!("{}/readyz", operator.base)).send().await
            && response.status() == StatusCode::OK
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never ready; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Applies a Function with code, as `kubectl apply` would; the name of its build Job.
pub fn triggers(cluster: &Cluster, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::erase::<sless_core::model::Trigger>(&());
    Api::namespaced_with(cluster.client.clone(), ns, &resource)
}

/// Creates a Trigger with `spec`, as `kubectl apply` would.
pub async fn apply_trigger(cluster: &Cluster, ns: &str, name: &str, spec: Value) {
    let resource = ApiResource::erase::<sless_core::model::Trigger>(&());
    let mut trigger = DynamicObject::new(name, &resource);
    trigger.data = json!({ "spec": spec });
    triggers(cluster, ns)
        .create(&PostParams::default(), &trigger)
        .await
        .unwrap();
}

pub async fn apply_function(
    functions: &Api<DynamicObject>,
    resource: &ApiResource,
    ns: &str,
    name: &str,
) -> String {
    let key = format!("contexts/{ns}/{name}/1.tar.gz");
    let mut function = DynamicObject::new(name, resource);
    function.data = json!({"spec": {"runtime": "python3.11", "entrypoint": "handler.handle",
        "memoryMb": 128, "timeoutSec": 30, "s3Key": key}});
    functions
        .create(&PostParams::default(), &function)
        .await
        .unwrap();
    build_job_name(name, &key)
}
