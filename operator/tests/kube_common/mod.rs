//! An in-memory Kubernetes API (kube-fake-client) with the sless CRDs registered, and
//! test doubles for what it cannot serve: pod logs and presigned S3 URLs.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, Request, Response};
use kube::client::Body;
use kube_fake_client::{ClientBuilder, interceptor};
use operator::{Context, ContextUrls, KubeConfig, PodLogs};
use serde_json::{Value, json};
use sless_core::model::{Function, FunctionJob, Service, Trigger};

pub const REGISTRY: &str = "registry.test/sless";

pub async fn fake_client() -> kube::Client {
    fake_client_with(interceptor::Funcs::new()).await
}

/// A fake API server whose answers `interceptors` may replace, e.g. to refuse an
/// object the way admission or validation of a real one would.
pub async fn fake_client_with(interceptors: interceptor::Funcs) -> kube::Client {
    let fake = ClientBuilder::new()
        .with_resource::<Function>()
        .with_resource::<Service>()
        .with_resource::<Trigger>()
        .with_resource::<FunctionJob>()
        .with_interceptor_funcs(interceptors)
        .build()
        .await
        .expect("fake client");
    with_namespaces(fake)
}

type Namespaces = Arc<Mutex<BTreeMap<String, Value>>>;

/// kube-fake-client 0.3 cannot route the cluster-scoped `/api/v1/namespaces[/name]`
/// paths (it reads `namespaces` as the start of a namespaced path), so this shim
/// serves Namespace create/get/list itself and passes everything else on.
fn with_namespaces(inner: kube::Client) -> kube::Client {
    let namespaces: Namespaces = Arc::default();
    let service = tower::service_fn(move |request: Request<Body>| {
        let inner = inner.clone();
        let namespaces = namespaces.clone();
        async move {
            let path = request.uri().path().to_string();
            let Some(rest) = path.strip_prefix("/api/v1/namespaces") else {
                return inner.send(request).await;
            };
            let name = rest.trim_start_matches('/');
            if name.contains('/') {
                return inner.send(request).await;
            }
            let method = request.method().clone();
            let body = request.into_body().collect_bytes().await?;
            Ok(serve_namespaces(&namespaces, &method, name, &body))
        }
    });
    kube::Client::new(service, "default")
}

fn reply(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string().into_bytes()))
        .unwrap()
}

fn failure(code: u16, reason: &str, message: String) -> Response<Body> {
    reply(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn serve_namespaces(
    namespaces: &Namespaces,
    method: &Method,
    name: &str,
    body: &[u8],
) -> Response<Body> {
    let mut namespaces = namespaces.lock().unwrap();
    match (method.as_str(), name) {
        ("POST", "") => {
            let mut object: Value = serde_json::from_slice(body).unwrap();
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            if namespaces.contains_key(&name) {
                return failure(
                    409,
                    "AlreadyExists",
                    format!("namespaces {name:?} already exists"),
                );
            }
            object["apiVersion"] = json!("v1");
            object["kind"] = json!("Namespace");
            object["metadata"]["uid"] = json!(format!("ns-{name}"));
            object["metadata"]["resourceVersion"] = json!("1");
            object["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
            namespaces.insert(name, object.clone());
            reply(201, object)
        }
        ("GET", "") => reply(
            200,
            json!({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {},
                   "items": namespaces.values().cloned().collect::<Vec<_>>()}),
        ),
        ("GET", name) => match namespaces.get(name) {
            Some(object) => reply(200, object.clone()),
            None => failure(404, "NotFound", format!("namespaces {name:?} not found")),
        },
        // Server-side apply: creates, or merges the applied labels in.
        ("PATCH", name) => {
            let applied: Value = serde_json::from_slice(body).unwrap();
            let object = namespaces.entry(name.to_string()).or_insert_with(|| {
                json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "uid": format!("ns-{name}"),
                                    "resourceVersion": "1",
                                    "creationTimestamp": "2025-01-01T00:00:00Z"}})
            });
            object["metadata"]["labels"] = applied["metadata"]["labels"].clone();
            reply(200, object.clone())
        }
        (method, _) => failure(405, "MethodNotAllowed", format!("{method} on namespaces")),
    }
}

/// Pod logs by (namespace, job, container).
#[derive(Default)]
pub struct FakeLogs {
    logs: Mutex<HashMap<(String, String, String), String>>,
}

impl FakeLogs {
    pub fn set(&self, namespace: &str, job: &str, container: &str, text: &str) {
        self.logs.lock().unwrap().insert(
            (namespace.into(), job.into(), container.into()),
            text.into(),
        );
    }
}

#[async_trait::async_trait]
impl PodLogs for FakeLogs {
    async fn job_log(&self, namespace: &str, job: &str, container: &str) -> Option<String> {
        self.logs
            .lock()
            .unwrap()
            .get(&(namespace.into(), job.into(), container.into()))
            .cloned()
    }
}

pub struct FakeUrls;

#[async_trait::async_trait]
impl ContextUrls for FakeUrls {
    async fn presigned_get(
        &self,
        key: &str,
        _ttl: Duration,
    ) -> Result<String, operator::PresignError> {
        Ok(format!("https://s3.test/sless/{key}?X-Amz-Signature=test"))
    }
}

pub fn config() -> KubeConfig {
    let mut config = KubeConfig::new(REGISTRY);
    config.external_url = Some("https://fn.example.com".into());
    config
}

pub fn context(client: kube::Client, config: KubeConfig, logs: Arc<FakeLogs>) -> Arc<Context> {
    Context::new(client, config, Arc::new(FakeUrls), logs)
}
