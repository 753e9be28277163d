//! The HTTP face: path routing, list/watch, patches, discovery, pod logs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::Emulator;
use crate::error::{ApiError, FieldError};
use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, Changes, Key, Origin, Part, PatchKind, State, present};

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_PERIOD: Duration = Duration::from_secs(5);
/// A watch without timeoutSeconds ends after this, like the API server's request timeout.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
/// Encoded events queued per watch connection before it waits on the client.
const WATCH_QUEUE: usize = 64;

type Params = HashMap<String, String>;

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.status())
    }
}

/// Every request lands here; a `/clients/{id}` path prefix names the caller in the log.
pub(crate) async fn handle(AxumState(emu): AxumState<Emulator>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let (client, path) = match uri.path().strip_prefix("/clients/") {
        Some(rest) => {
            let (id, path) = rest.split_once('/').unwrap_or((rest, ""));
            (Some(id.to_string()), format!("/{path}"))
        }
        None => (None, uri.path().to_string()),
    };
    let params: Params = Query::try_from_uri(&uri).map(|q| q.0).unwrap_or_default();
    let opened = emu.open(
        client.as_deref(),
        method.as_str(),
        &path,
        uri.query().unwrap_or_default(),
    );
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => {
            let error = ApiError::bad_request(format!("cannot read the request body: {e}"));
            emu.record(&opened, error.code, None);
            return error.into_response();
        }
    };
    let response = if emu.is_down() {
        ApiError::service_unavailable().into_response()
    } else {
        route(&emu, &method, &path, &params, &headers, &body)
            .unwrap_or_else(IntoResponse::into_response)
    };
    let created_name = (method == Method::POST)
        .then(|| serde_json::from_slice::<Value>(&body).ok())
        .flatten()
        .and_then(|object| object["metadata"]["name"].as_str().map(str::to_string));
    emu.record(&opened, response.status().as_u16(), created_name);
    response
}

fn route(
    emu: &Emulator,
    method: &Method,
    path: &str,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let discovery = |body: Option<Value>| -> Result<Response, ApiError> {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed(method.as_str()));
        }
        body.map(|b| json_response(StatusCode::OK, &b))
            .ok_or_else(ApiError::no_route)
    };
    let state = || emu.state();
    match segments.as_slice() {
        ["version"] => discovery(Some(json!({
            "major": "1", "minor": "34", "gitVersion": "v1.34.0-kube-emulator",
            "gitCommit": "", "gitTreeState": "clean", "buildDate": "2025-08-27T00:00:00Z",
            "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
        }))),
        ["api"] => discovery(Some(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": emu.addr().to_string()}],
        }))),
        ["apis"] => discovery(Some(json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": resources::groups(&resources_of(emu)),
        }))),
        ["api", "v1"] => discovery(resources::resource_list(&resources_of(emu), "", "v1")),
        ["apis", group] => {
            let all = resources_of(emu);
            let known = all.iter().any(|r| r.group == *group);
            discovery(known.then(|| resources::group(&all, group)))
        }
        ["apis", group, version] => {
            discovery(resources::resource_list(&resources_of(emu), group, version))
        }
        ["api", "v1", rest @ ..] => {
            let target = Target::parse(&state(), "", "v1", rest)?;
            target.serve(emu, method, params, headers, body)
        }
        ["apis", group, version, rest @ ..] => {
            let target = Target::parse(&state(), group, version, rest)?;
            target.serve(emu, method, params, headers, body)
        }
        _ => Err(ApiError::no_route()),
    }
}

fn resources_of(emu: &Emulator) -> Vec<Resource> {
    emu.state()
        .resources()
        .iter()
        .map(|r| Resource::clone(r))
        .collect()
}

/// A resource path: collection, object, or object subresource.
struct Target {
    res: Arc<Resource>,
    version: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn parse(state: &State, group: &str, version: &str, rest: &[&str]) -> Result<Self, ApiError> {
        let namespaced_path = match rest {
            ["namespaces", ns, plural, tail @ ..] => state
                .find(group, version, plural)
                .filter(|r| r.namespaced)
                .map(|r| (r, Some(ns.to_string()), tail)),
            _ => None,
        };
        let (res, namespace, tail) = match namespaced_path {
            Some(found) => found,
            None => {
                let [plural, tail @ ..] = rest else {
                    return Err(ApiError::no_route());
                };
                let res = state
                    .find(group, version, plural)
                    .ok_or_else(ApiError::no_route)?;
                (res, None, tail)
            }
        };
        let (name, subresource) = match tail {
            [] => (None, None),
            [name] => (Some(name.to_string()), None),
            [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
            _ => return Err(ApiError::no_route()),
        };
        // A namespaced object is only addressed within its namespace.
        if res.namespaced && namespace.is_none() && name.is_some() {
            return Err(ApiError::no_route());
        }
        let sub_ok = match subresource.as_deref() {
            None => true,
            Some("status") => res.version(version).is_some_and(|v| v.status),
            Some("log") => res.group.is_empty() && res.plural == "pods",
            Some("scale") => resources::has_scale(&res),
            Some(_) => false,
        };
        if !sub_ok {
            return Err(ApiError::no_route());
        }
        Ok(Self {
            res,
            version: version.to_string(),
            namespace,
            name,
            subresource,
        })
    }

    fn serve(
        self,
        emu: &Emulator,
        method: &Method,
        params: &Params,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Response, ApiError> {
        let ns = self.namespace.as_deref();
        let Some(name) = self.name.clone() else {
            return match *method {
                Method::GET
                    if matches!(params.get("watch").map(String::as_str), Some("true" | "1")) =>
                {
                    self.watch(emu, params)
                }
                Method::GET => self.list(emu, params),
                Method::POST if self.res.namespaced == ns.is_some() => {
                    let object = parse_json(body)?;
                    let created = write(emu, params, |s| {
                        s.create(&self.res, &self.version, ns, object, Origin::Client)
                    })?;
                    Ok(self.respond(StatusCode::CREATED, created))
                }
                Method::DELETE => self.delete_collection(emu, params),
                _ => Err(ApiError::method_not_allowed(method.as_str())),
            };
        };
        let part = match self.subresource.as_deref() {
            Some("log") if *method == Method::GET => return self.log(emu, &name, params),
            Some("scale") => return self.scale(emu, method, &name, params, headers, body),
            Some("status") => Part::Status,
            None => Part::Main,
            Some(_) => return Err(ApiError::method_not_allowed(method.as_str())),
        };
        match *method {
            Method::GET => {
                let object = emu.state().get(&self.res, ns, &name)?;
                Ok(self.respond(StatusCode::OK, object))
            }
            Method::PUT => {
                let object = parse_json(body)?;
                let updated = write(emu, params, |s| {
                    s.update(
                        &self.res,
                        &self.version,
                        ns,
                        &name,
                        object,
                        part,
                        Origin::Client,
                    )
                })?;
                Ok(self.respond(StatusCode::OK, updated))
            }
            Method::PATCH => {
                let content_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let kind = match content_type.split(';').next().unwrap_or_default().trim() {
                    "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                        PatchKind::Merge
                    }
                    "application/json-patch+json" => PatchKind::Json,
                    "application/apply-patch+yaml" => {
                        match params.get("fieldManager").filter(|m| !m.is_empty()) {
                            Some(manager) => PatchKind::Apply(manager.clone()),
                            None => {
                                return Err(ApiError::bad_request(
                                    "PATCH requests with an apply patch must set fieldManager",
                                ));
                            }
                        }
                    }
                    other => {
                        return Err(ApiError {
                            code: 415,
                            reason: "UnsupportedMediaType",
                            message: format!(
                                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml ({other})"
                            ),
                            details: json!({}),
                        });
                    }
                };
                let (object, created) = write(emu, params, |s| {
                    s.patch(&self.res, &self.version, ns, &name, kind, body, part)
                })?;
                let code = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(self.respond(code, object))
            }
            Method::DELETE if part == Part::Main => {
                let options = if body.is_empty() {
                    json!({})
                } else {
                    parse_json(body)?
                };
                let (uid, pending) = write(emu, params, |s| {
                    let uid = s.get(&self.res, ns, &name)?["metadata"]["uid"].clone();
                    let pending = s.delete(&self.res, ns, &name, &options["preconditions"])?;
                    Ok((uid, pending))
                })?;
                Ok(match pending {
                    Some(object) => self.respond(StatusCode::OK, object),
                    None => json_response(
                        StatusCode::OK,
                        &json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                            "details": {"name": name, "group": self.res.group, "kind": self.res.plural, "uid": uid},
                        }),
                    ),
                })
            }
            _ => Err(ApiError::method_not_allowed(method.as_str())),
        }
    }

    /// `.../deployments/NAME/scale`: the replicas as an `autoscaling/v1` Scale, read,
    /// replaced or patched (merge, JSON or apply patch of the Scale).
    fn scale(
        &self,
        emu: &Emulator,
        method: &Method,
        name: &str,
        params: &Params,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Response, ApiError> {
        let ns = self.namespace.as_deref();
        let current = scale_of(&emu.state().get(&self.res, ns, name)?);
        let wanted = match *method {
            Method::GET => return Ok(json_response(StatusCode::OK, &current)),
            Method::PUT => {
                let given = parse_json(body)?;
                let rv = given["metadata"]["resourceVersion"].as_str();
                if rv.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str())
                {
                    return Err(ApiError::conflict(&self.res.group, &self.res.plural, name));
                }
                given
            }
            Method::PATCH => {
                let mut patched = current;
                let content_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if content_type.starts_with("application/json-patch+json") {
                    let patch: json_patch::Patch = serde_json::from_slice(body)
                        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                    json_patch::patch(&mut patched, &patch)
                        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
                } else {
                    let patch: Value = serde_json::from_slice(body)
                        .or_else(|_| serde_yaml::from_slice(body))
                        .map_err(|e| ApiError::bad_request(format!("invalid patch: {e}")))?;
                    json_patch::merge(&mut patched, &patch);
                }
                patched
            }
            _ => return Err(ApiError::method_not_allowed(method.as_str())),
        };
        let replicas = wanted["spec"]["replicas"]
            .as_i64()
            .filter(|r| *r >= 0)
            .ok_or_else(|| {
                ApiError::invalid(
                    "Scale",
                    "autoscaling",
                    name,
                    &[FieldError::new(
                        "spec.replicas",
                        "FieldValueInvalid",
                        format!(
                            "Invalid value: {}: must be greater than or equal to 0",
                            wanted["spec"]["replicas"]
                        ),
                    )],
                )
            })?;
        let updated = write(emu, params, |s| {
            s.scale(&self.res, &self.version, ns, name, replicas)
        })?;
        Ok(json_response(StatusCode::OK, &scale_of(&updated)))
    }

    fn respond(&self, code: StatusCode, object: Value) -> Response {
        json_response(code, &present(object, &self.res, &self.version))
    }

    fn selectors(params: &Params) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let get = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
        Ok((
            LabelSelector::parse(get("labelSelector"))?,
            FieldSelector::parse(get("fieldSelector"))?,
        ))
    }

    fn list(&self, emu: &Emulator, params: &Params) -> Result<Response, ApiError> {
        let (labels, fields) = Self::selectors(params)?;
        let state = emu.state();
        let items: Vec<Value> = state
            .list(&self.res, self.namespace.as_deref())
            .into_iter()
            .filter(|o| labels.matches(o) && fields.matches(o))
            .map(|o| present(o, &self.res, &self.version))
            .collect();
        let list = json!({
            "kind": format!("{}List", self.res.kind),
            "apiVersion": self.res.api_version(&self.version),
            "metadata": {"resourceVersion": state.resource_version().to_string()},
            "items": items,
        });
        Ok(json_response(StatusCode::OK, &list))
    }

    fn delete_collection(&self, emu: &Emulator, params: &Params) -> Result<Response, ApiError> {
        if self.res.namespaced && self.namespace.is_none() {
            return Err(ApiError::method_not_allowed("DELETE"));
        }
        let (labels, fields) = Self::selectors(params)?;
        write(emu, params, |state| {
            let names: Vec<String> = state
                .list(&self.res, self.namespace.as_deref())
                .into_iter()
                .filter(|o| labels.matches(o) && fields.matches(o))
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            for name in names {
                state.delete(&self.res, self.namespace.as_deref(), &name, &Value::Null)?;
            }
            Ok(())
        })?;
        Ok(json_response(
            StatusCode::OK,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        ))
    }

    fn log(&self, emu: &Emulator, pod: &str, params: &Params) -> Result<Response, ApiError> {
        let ns = self.namespace.as_deref().unwrap_or_default();
        let text = {
            let state = emu.state();
            state.get(&self.res, Some(ns), pod)?;
            state.log(ns, pod)
        };
        let mut text = match params
            .get("tailLines")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => {
                let lines: Vec<&str> = text.lines().collect();
                let mut tail = lines[lines.len().saturating_sub(n)..].join("\n");
                if n > 0 && text.ends_with('\n') {
                    tail.push('\n');
                }
                tail
            }
            None => text,
        };
        if let Some(limit) = params
            .get("limitBytes")
            .and_then(|n| n.parse::<usize>().ok())
            && text.len() > limit
        {
            let mut cut = limit;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
    }

    fn watch(self, emu: &Emulator, params: &Params) -> Result<Response, ApiError> {
        let (labels, fields) = Self::selectors(params)?;
        let flag = |k: &str| params.get(k).is_some_and(|v| v == "true" || v == "1");
        let send_initial = flag("sendInitialEvents");
        let bookmarks = flag("allowWatchBookmarks");
        let timeout = params
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
        let since = match params.get("resourceVersion").filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => Some(text.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        };
        let filter = WatchFilter {
            res: self.res,
            version: self.version,
            namespace: self.namespace,
            labels,
            fields,
        };
        let mut lines = Vec::new();
        let (receiver, seen) = {
            let state = emu.state();
            let current = state.resource_version();
            if send_initial || matches!(since, None | Some(0)) {
                // Start from the current state: synthetic ADDED events for what exists.
                for object in state.list(&filter.res, filter.namespace.as_deref()) {
                    if filter.matches(&object) {
                        lines.push(json!({"type": "ADDED", "object": filter.present(object)}));
                    }
                }
                if send_initial {
                    lines.push(filter.bookmark(current, true));
                }
                let (_, receiver) = state.changes_since(current)?;
                (Some(receiver), current)
            } else {
                match state.changes_since(since.unwrap_or_default()) {
                    Ok((replay, receiver)) => {
                        lines.extend(replay.iter().filter_map(|c| filter.event(c)));
                        (Some(receiver), current)
                    }
                    Err(gone) => {
                        lines.push(json!({"type": "ERROR", "object": gone.status()}));
                        (None, current)
                    }
                }
            }
        };
        let (tx, mut rx) = mpsc::channel::<Bytes>(WATCH_QUEUE);
        tokio::spawn(stream_watch(WatchStream {
            outage: emu.outage(),
            filter,
            lines,
            receiver,
            seen,
            bookmarks,
            timeout,
            tx,
        }));
        let body = futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|line| line.map(Ok::<_, Infallible>))
        });
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(body),
        )
            .into_response())
    }
}

/// Runs a write on the store, or with `dryRun` on a throwaway copy that no watch sees.
fn write<T>(
    emu: &Emulator,
    params: &Params,
    op: impl FnOnce(&mut State) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let mut state = emu.state();
    if params.contains_key("dryRun") {
        op(&mut state.dry_run_copy())
    } else {
        op(&mut state)
    }
}

/// The `autoscaling/v1` Scale of a Deployment.
fn scale_of(deployment: &Value) -> Value {
    let meta = &deployment["metadata"];
    let selector: Vec<String> = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": deployment["spec"]["replicas"]},
        "status": {
            "replicas": deployment["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector.join(","),
        },
    })
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

struct WatchFilter {
    res: Arc<Resource>,
    version: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    fn covers(&self, key: &Key) -> bool {
        key.group == self.res.group
            && key.plural == self.res.plural
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
    }

    fn present(&self, object: Value) -> Value {
        present(object, &self.res, &self.version)
    }

    /// The event this watch sees for a change: an object leaving the selection is
    /// DELETED for it, one entering is ADDED, as with the API server's watch cache.
    fn event(&self, change: &Change) -> Option<Value> {
        if !self.covers(&change.key) {
            return None;
        }
        let now = self.matches(&change.object);
        let kind = match change.kind {
            "MODIFIED" => {
                let before = change.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return None,
                }
            }
            kind if now => kind,
            _ => return None,
        };
        Some(json!({"type": kind, "object": self.present(change.object.clone())}))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {
            "kind": self.res.kind,
            "apiVersion": self.res.api_version(&self.version),
            "metadata": metadata,
        }})
    }
}

struct WatchStream {
    /// Ends the watch when the API server goes down.
    outage: tokio::sync::watch::Receiver<bool>,
    filter: WatchFilter,
    lines: Vec<Value>,
    receiver: Option<Changes>,
    /// Every change up to here has been considered for this watch.
    seen: u64,
    bookmarks: bool,
    timeout: Duration,
    tx: mpsc::Sender<Bytes>,
}

fn encode(event: &Value) -> Bytes {
    let mut line = event.to_string();
    line.push('\n');
    Bytes::from(line)
}

/// Feeds one watch connection until its timeout, the client leaving, or it falling
/// too far behind (then it ends, and the client resumes from its last version).
async fn stream_watch(mut w: WatchStream) {
    for line in &w.lines {
        if w.tx.send(encode(line)).await.is_err() {
            return;
        }
    }
    let Some(mut receiver) = w.receiver.take() else {
        return;
    };
    let deadline = tokio::time::sleep(w.timeout);
    tokio::pin!(deadline);
    let mut ticks = tokio::time::interval(BOOKMARK_PERIOD);
    ticks.reset();
    loop {
        let line = tokio::select! {
            () = &mut deadline => return,
            () = w.tx.closed() => return,
            _ = w.outage.wait_for(|down| *down) => return,
            _ = ticks.tick(), if w.bookmarks => w.filter.bookmark(w.seen, false),
            change = receiver.recv() => match change {
                Ok(change) => {
                    if change.rv <= w.seen {
                        continue;
                    }
                    w.seen = change.rv;
                    match w.filter.event(&change) {
                        Some(event) => event,
                        None => continue,
                    }
                }
                Err(_) => return,
            },
        };
        if w.tx.send(encode(&line)).await.is_err() {
            return;
        }
    }
}
