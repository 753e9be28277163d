//! The object store: resource versions, writes with the API server's rules, owner and
//! finalizer handling, and the bounded change history watches replay from.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, LazyLock};

use chrono::{SecondsFormat, Utc};
use regex::Regex;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::{ApiError, FieldError};
use crate::resources::{self, Resource};
use crate::schema;

/// Changes kept for watches that resume from a resource version.
const HISTORY: usize = 1000;
/// Changes buffered per watcher; a watcher further behind is dropped.
const WATCH_BUFFER: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    pub group: String,
    pub plural: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub(crate) fn new(res: &Resource, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: res.group.clone(),
            plural: res.plural.clone(),
            namespace: if res.namespaced {
                namespace.unwrap_or_default().to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }
}

/// One committed write, as watches see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub key: Key,
    pub kind: &'static str,
    pub object: Value,
    /// The object before a modification, so selector watches can turn it into ADDED/DELETED.
    pub old: Option<Value>,
}

/// Live changes for one watch.
pub(crate) type Changes = broadcast::Receiver<Arc<Change>>;

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    Main,
    Status,
}

/// Clients go through the API server's rules; the test handle may also set status on create.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Origin {
    Client,
    Handle,
}

pub(crate) enum PatchKind {
    Merge,
    Json,
    /// Server-side apply by a field manager.
    Apply(String),
}

/// Whose last apply to which object (and whether to its status).
type AppliedBy = (Key, String, Part);

pub(crate) struct State {
    rv: u64,
    serial: u64,
    seed: u64,
    resources: Vec<Arc<Resource>>,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    /// Watches from a resource version older than this get 410 Gone.
    compacted: u64,
    changes: broadcast::Sender<Arc<Change>>,
    logs: HashMap<(String, String), String>,
    /// The last configuration each manager applied, so a later apply drops what it omits.
    applied: HashMap<AppliedBy, Value>,
}

pub(crate) fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn meta(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn rv_of(object: &Value) -> &str {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

/// The object with the server's own view of apiVersion and kind for `version`.
pub(crate) fn present(mut object: Value, res: &Resource, version: &str) -> Value {
    object["apiVersion"] = json!(res.api_version(version));
    object["kind"] = json!(res.kind);
    object
}

/// What decides `generation`: everything but metadata, and status when it is a subresource.
fn spec_part(object: &Value, status_subresource: bool) -> Value {
    let mut rest = object.clone();
    if let Some(fields) = rest.as_object_mut() {
        for key in ["metadata", "apiVersion", "kind"] {
            fields.remove(key);
        }
        if status_subresource {
            fields.remove("status");
        }
    }
    rest
}

static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        .expect("static regex")
});
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("static regex"));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").expect("static regex")
});

fn validate_meta(res: &Resource, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (ok, what) = if res.group.is_empty() && res.plural == "namespaces" {
        (
            name.len() <= 63 && DNS_LABEL.is_match(name),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        )
    } else {
        (
            name.len() <= 253 && SUBDOMAIN.is_match(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    };
    if !ok {
        errors.push(FieldError::new(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {}: {what}", json!(name)),
        ));
    }
    if let Some(labels) = object["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            let (prefix, short) = key.rsplit_once('/').unwrap_or(("", key));
            let key_ok = !short.is_empty()
                && short.len() <= 63
                && LABEL_VALUE.is_match(short)
                && (prefix.is_empty() || (prefix.len() <= 253 && SUBDOMAIN.is_match(prefix)));
            if !key_ok {
                errors.push(FieldError::new(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: {}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character", json!(key)),
                ));
            }
            let text = value.as_str().unwrap_or_default();
            if !value.is_string() || text.len() > 63 || !LABEL_VALUE.is_match(text) {
                errors.push(FieldError::new(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: {value}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', must start and end with an alphanumeric character, and must be no more than 63 characters"),
                ));
            }
        }
    }
    errors
}

impl State {
    pub(crate) fn new() -> Self {
        let seed = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
        let mut state = Self {
            rv: 0,
            serial: 0,
            seed,
            resources: resources::builtins().into_iter().map(Arc::new).collect(),
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            changes: broadcast::channel(WATCH_BUFFER).0,
            logs: HashMap::new(),
            applied: HashMap::new(),
        };
        let namespaces = state.find("", "v1", "namespaces").expect("built in");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let object = json!({"metadata": {"name": name}});
            state
                .create(&namespaces, "v1", None, object, Origin::Client)
                .expect("a fresh store takes the standard namespaces");
        }
        state
    }

    /// A copy to try a write on: same objects, no history, no watchers.
    pub(crate) fn dry_run_copy(&self) -> Self {
        Self {
            rv: self.rv,
            serial: self.serial,
            seed: self.seed,
            resources: self.resources.clone(),
            objects: self.objects.clone(),
            history: VecDeque::new(),
            compacted: self.rv,
            changes: broadcast::channel(1).0,
            logs: HashMap::new(),
            applied: self.applied.clone(),
        }
    }

    pub(crate) fn resources(&self) -> &[Arc<Resource>] {
        &self.resources
    }

    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.plural == plural && r.version(version).is_some())
            .cloned()
    }

    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        // xorshift over a per-store seed: unique, and unlike across emulator runs.
        let mut x = self.seed ^ self.serial.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }

    fn new_uid(&mut self) -> String {
        let serial = self.serial + 1;
        let r = self.next_serial();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            r >> 32,
            (r >> 16) & 0xffff,
            r & 0xfff,
            (r >> 52) & 0xfff,
            serial
        )
    }

    fn generated_name(&mut self, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut r = self.next_serial();
        let mut name = prefix.to_string();
        for _ in 0..5 {
            name.push(ALPHABET[(r % ALPHABET.len() as u64) as usize] as char);
            r /= ALPHABET.len() as u64;
        }
        name
    }

    pub(crate) fn get(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&Key::new(res, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&res.group, &res.plural, name))
    }

    /// Objects of one resource, in one namespace or all of them.
    pub(crate) fn list(&self, res: &Resource, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(k, _)| k.group == res.group && k.plural == res.plural)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Stores a new version of an object (or its removal) and tells the watches.
    fn commit(
        &mut self,
        key: &Key,
        object: Value,
        old: Option<Value>,
        kind: &'static str,
    ) -> Value {
        self.rv += 1;
        let mut object = object;
        meta(&mut object).insert("resourceVersion".into(), json!(self.rv.to_string()));
        if kind == "DELETED" {
            self.objects.remove(key);
            self.applied.retain(|(k, _, _), _| k != key);
        } else {
            self.objects.insert(key.clone(), object.clone());
        }
        let change = Arc::new(Change {
            rv: self.rv,
            key: key.clone(),
            kind,
            object: object.clone(),
            old,
        });
        self.history.push_back(change.clone());
        while self.history.len() > HISTORY {
            if let Some(evicted) = self.history.pop_front() {
                self.compacted = evicted.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.changes.send(change);
        object
    }

    /// Forgets the change history, as an etcd compaction does.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Changes after `rv` and a receiver for later ones, or 410 when they are forgotten.
    pub(crate) fn changes_since(&self, rv: u64) -> Result<(Vec<Arc<Change>>, Changes), ApiError> {
        if rv < self.compacted {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                self.compacted + 1
            )));
        }
        let replay = self.history.iter().filter(|c| c.rv > rv).cloned().collect();
        Ok((replay, self.changes.subscribe()))
    }

    pub(crate) fn create(
        &mut self,
        res: &Arc<Resource>,
        version: &str,
        namespace: Option<&str>,
        mut object: Value,
        origin: Origin,
    ) -> Result<Value, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not an object",
            ));
        }
        check_type(&object, res, version)?;
        let given_ns = object["metadata"]["namespace"].as_str().map(str::to_string);
        if res.namespaced {
            let ns = match (namespace, given_ns.as_deref()) {
                (Some(url), Some(body)) if url != body => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(ns), _) | (None, Some(ns)) => ns.to_string(),
                (None, None) => return Err(ApiError::bad_request("a namespace is required")),
            };
            if !self.objects.contains_key(&namespace_key(&ns)) {
                return Err(ApiError::not_found("", "namespaces", &ns));
            }
            meta(&mut object).insert("namespace".into(), json!(ns));
        } else {
            meta(&mut object).remove("namespace");
        }
        let name = match (
            object["metadata"]["name"]
                .as_str()
                .filter(|n| !n.is_empty()),
            object["metadata"]["generateName"].as_str(),
        ) {
            (Some(name), _) => name.to_string(),
            (None, Some(prefix)) => {
                let prefix = prefix.to_string();
                let ns = object["metadata"]["namespace"].as_str().map(str::to_string);
                loop {
                    let candidate = self.generated_name(&prefix);
                    if !self
                        .objects
                        .contains_key(&Key::new(res, ns.as_deref(), &candidate))
                    {
                        break candidate;
                    }
                }
            }
            (None, None) => {
                return Err(ApiError::invalid(
                    &res.kind,
                    &res.group,
                    "",
                    &[FieldError::new(
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        };
        meta(&mut object).insert("name".into(), json!(name));
        let ns = object["metadata"]["namespace"].as_str().map(str::to_string);
        let key = Key::new(res, ns.as_deref(), &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&res.group, &res.plural, &name));
        }
        let status_subresource = res.version(version).is_some_and(|v| v.status);
        if origin == Origin::Client
            && status_subresource
            && let Some(fields) = object.as_object_mut()
        {
            fields.remove("status");
        }
        object = present(object, res, version);
        default_fields(res, &mut object);
        self.validate(res, version, &mut object, &name)?;
        let uid = self.new_uid();
        let fields = meta(&mut object);
        fields.insert("uid".into(), json!(uid));
        fields.insert("creationTimestamp".into(), json!(now()));
        fields.insert("generation".into(), json!(1));
        for server_owned in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
        ] {
            fields.remove(server_owned);
        }
        // The phases the API server gives new namespaces and pods.
        if is_namespace(res) {
            object["status"] = json!({"phase": "Active"});
        } else if res.group.is_empty() && res.plural == "pods" && origin == Origin::Client {
            object["status"] = json!({"phase": "Pending"});
        }
        self.define(res, &mut object)?;
        let stored = self.commit(&key, object, None, "ADDED");
        self.collect_orphan(&key);
        Ok(stored)
    }

    /// A CRD write (re)defines the resource it names.
    fn define(&mut self, res: &Resource, object: &mut Value) -> Result<(), ApiError> {
        if !is_crd(res) {
            return Ok(());
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let defined = resources::from_crd(object).map_err(|detail| {
            let (field, detail) = detail.split_once(": ").unwrap_or(("spec", &detail));
            ApiError::invalid(
                &res.kind,
                &res.group,
                &name,
                &[FieldError::new(
                    field,
                    "FieldValueInvalid",
                    detail.to_string(),
                )],
            )
        })?;
        if self.resources.iter().any(|r| {
            r.group == defined.group
                && r.plural == defined.plural
                && r.crd.as_deref() != Some(&name)
        }) {
            return Err(ApiError::unprocessable(format!(
                "{} is already served by the API server",
                crate::error::group_resource(&defined.group, &defined.plural)
            )));
        }
        object["status"] = resources::crd_status(object, &now());
        self.resources.retain(|r| r.crd.as_deref() != Some(&name));
        self.resources.push(Arc::new(defined));
        Ok(())
    }

    fn validate(
        &self,
        res: &Resource,
        version: &str,
        object: &mut Value,
        name: &str,
    ) -> Result<(), ApiError> {
        let mut errors = validate_meta(res, object);
        if let Some(schema) = res.version(version).and_then(|v| v.schema.as_ref()) {
            errors.extend(schema::apply(schema, object));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&res.kind, &res.group, name, &errors))
        }
    }

    /// PUT: replaces the object (or only its status), refusing a stale resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        &mut self,
        res: &Arc<Resource>,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
        origin: Origin,
    ) -> Result<Value, ApiError> {
        let key = Key::new(res, namespace, name);
        let old = self.get(res, namespace, name)?;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not an object",
            ));
        }
        check_type(&body, res, version)?;
        if let Some(given) = body["metadata"]["name"].as_str()
            && given != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        if res.namespaced
            && let Some(given) = body["metadata"]["namespace"].as_str()
            && Some(given) != namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let given_rv = rv_of(&body);
        if !given_rv.is_empty() && given_rv != rv_of(&old) {
            return Err(ApiError::conflict(&res.group, &res.plural, name));
        }
        let status_subresource = res.version(version).is_some_and(|v| v.status);
        let mut new = match part {
            Part::Status => {
                let mut new = old.clone();
                match body.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        if let Some(fields) = new.as_object_mut() {
                            fields.remove("status");
                        }
                    }
                }
                new
            }
            Part::Main => {
                let mut new = body;
                if status_subresource && origin == Origin::Client {
                    match old.get("status") {
                        Some(status) => new["status"] = status.clone(),
                        None => {
                            if let Some(fields) = new.as_object_mut() {
                                fields.remove("status");
                            }
                        }
                    }
                }
                new
            }
        };
        new = present(new, res, version);
        let fields = meta(&mut new);
        fields.insert("name".into(), json!(name));
        if res.namespaced {
            fields.insert("namespace".into(), json!(key.namespace));
        }
        for server_owned in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old["metadata"].get(server_owned) {
                Some(value) => fields.insert(server_owned.into(), value.clone()),
                None => fields.remove(server_owned),
            };
        }
        fields.insert(
            "resourceVersion".into(),
            old["metadata"]["resourceVersion"].clone(),
        );
        default_fields(res, &mut new);
        self.validate(res, version, &mut new, name)?;
        let changed = update_rules(res, &old, &new);
        if !changed.is_empty() {
            return Err(ApiError::invalid(&res.kind, &res.group, name, &changed));
        }
        if part == Part::Main {
            self.define(res, &mut new)?;
        }
        if spec_part(&new, status_subresource) != spec_part(&old, status_subresource) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta(&mut new).insert("generation".into(), json!(generation));
        }
        if new == old {
            // A write that changes nothing is not a write: no new version, no event.
            return Ok(old);
        }
        if new["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
            // The last finalizer is gone: the update is the deletion, as in the API server.
            let removed = self.commit(&key, new, Some(old), "DELETED");
            let dependents = self.dependents(&key, &removed);
            self.delete_cascading(dependents);
            return Ok(removed);
        }
        let stored = self.commit(&key, new, Some(old), "MODIFIED");
        self.collect_orphan(&key);
        Ok(stored)
    }

    /// PATCH: applies the patch to the stored object, then updates it. Server-side apply
    /// creates a missing object and otherwise deep-merges (maps merge, lists replace).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        res: &Arc<Resource>,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        part: Part,
    ) -> Result<(Value, bool), ApiError> {
        let old = match self.get(res, namespace, name) {
            Ok(old) => old,
            Err(missing) => {
                return match kind {
                    PatchKind::Apply(manager) if part == Part::Main => {
                        let applied = parse_apply(body)?;
                        let mut object = applied.clone();
                        if let Some(given) = object["metadata"]["name"].as_str()
                            && given != name
                        {
                            return Err(ApiError::bad_request(format!(
                                "the name of the object ({given}) does not match the name on the URL ({name})"
                            )));
                        }
                        meta(&mut object).insert("name".into(), json!(name));
                        let created =
                            self.create(res, version, namespace, object, Origin::Client)?;
                        let key = Key::new(res, created["metadata"]["namespace"].as_str(), name);
                        self.applied.insert((key, manager, part), applied);
                        Ok((created, true))
                    }
                    _ => Err(missing),
                };
            }
        };
        let mut patched = present(old, res, version);
        let mut applied_by = None;
        match kind {
            PatchKind::Merge => {
                let patch: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
                json_patch::merge(&mut patched, &patch);
            }
            PatchKind::Apply(manager) => {
                let applied = parse_apply(body)?;
                let by = (Key::new(res, namespace, name), manager, part);
                if let Some(previous) = self.applied.get(&by) {
                    drop_unapplied(&mut patched, previous, &applied);
                }
                json_patch::merge(&mut patched, &applied);
                applied_by = Some((by, applied));
            }
            PatchKind::Json => {
                let patch: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut patched, &patch)
                    .map_err(|e| ApiError::unprocessable(e.to_string()))?;
            }
        }
        let updated = self.update(res, version, namespace, name, patched, part, Origin::Client)?;
        if let Some((by, applied)) = applied_by
            && self.objects.contains_key(&by.0)
        {
            self.applied.insert(by, applied);
        }
        Ok((updated, false))
    }

    /// A write of a Deployment's `scale` subresource: sets `spec.replicas`, which from
    /// then on belongs to the writer, so a later apply that omits it keeps it, as the
    /// API server's field ownership does.
    pub(crate) fn scale(
        &mut self,
        res: &Arc<Resource>,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        replicas: i64,
    ) -> Result<Value, ApiError> {
        let mut object = self.get(res, namespace, name)?;
        object["spec"]["replicas"] = json!(replicas);
        let key = Key::new(res, namespace, name);
        for ((applied_to, _, _), applied) in &mut self.applied {
            if *applied_to == key
                && let Some(spec) = applied.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("replicas");
            }
        }
        self.update(
            res,
            version,
            namespace,
            name,
            object,
            Part::Main,
            Origin::Client,
        )
    }

    /// DELETE: marks an object with finalizers, removes one without (and its dependents).
    /// `Ok(Some(object))` while finalizers hold it.
    pub(crate) fn delete(
        &mut self,
        res: &Arc<Resource>,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Value,
    ) -> Result<Option<Value>, ApiError> {
        let key = Key::new(res, namespace, name);
        let old = self.get(res, namespace, name)?;
        let mismatch = |field: &str| {
            preconditions
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|want| old["metadata"][field].as_str() != Some(want))
        };
        if mismatch("uid") || mismatch("resourceVersion") {
            return Err(ApiError::conflict(&res.group, &res.plural, name));
        }
        self.delete_cascading(vec![key.clone()]);
        Ok(self.objects.get(&key).cloned())
    }

    fn delete_cascading(&mut self, mut pending: Vec<Key>) {
        while let Some(key) = pending.pop() {
            let Some(current) = self.objects.get(&key).cloned() else {
                continue;
            };
            if has_finalizers(&current) {
                if current["metadata"].get("deletionTimestamp").is_none() {
                    let mut marked = current.clone();
                    let fields = meta(&mut marked);
                    fields.insert("deletionTimestamp".into(), json!(now()));
                    fields.insert("deletionGracePeriodSeconds".into(), json!(0));
                    self.commit(&key, marked, Some(current), "MODIFIED");
                }
                continue;
            }
            self.commit(&key, current.clone(), None, "DELETED");
            pending.extend(self.dependents(&key, &current));
        }
    }

    /// What goes with a removed object: dependents left without owners, a namespace's
    /// content, a CRD's resources.
    fn dependents(&mut self, key: &Key, removed: &Value) -> Vec<Key> {
        let mut keys = Vec::new();
        if let Some(uid) = removed["metadata"]["uid"].as_str() {
            keys.extend(
                self.objects
                    .iter()
                    .filter(|(_, o)| owner_uids(o).any(|u| u == uid))
                    .map(|(k, _)| k.clone())
                    .filter(|k| self.orphaned(k)),
            );
        }
        if key.group.is_empty() && key.plural == "namespaces" {
            keys.extend(
                self.objects
                    .keys()
                    .filter(|k| k.namespace == key.name)
                    .cloned(),
            );
        }
        if key.group == "apiextensions.k8s.io" && key.plural == "customresourcedefinitions" {
            let served = self
                .resources
                .iter()
                .find(|r| r.crd.as_deref() == Some(&key.name))
                .map(|r| (r.group.clone(), r.plural.clone()));
            self.resources
                .retain(|r| r.crd.as_deref() != Some(&key.name));
            if let Some((group, plural)) = served {
                keys.extend(
                    self.objects
                        .keys()
                        .filter(|k| k.group == group && k.plural == plural)
                        .cloned(),
                );
            }
        }
        keys
    }

    /// True when an object has owner references and every owner is absent. As in the
    /// garbage collector, an owner is looked up by kind and name (a namespaced one in the
    /// dependent's namespace) and must have the referenced uid; a reference that cannot
    /// be resolved (unknown kind, namespaced owner of a cluster-scoped object) keeps it.
    fn orphaned(&self, key: &Key) -> bool {
        let Some(object) = self.objects.get(key) else {
            return false;
        };
        let refs = object["metadata"]["ownerReferences"].as_array();
        let Some(refs) = refs.filter(|r| !r.is_empty()) else {
            return false;
        };
        refs.iter().all(|owner| {
            let (group, version) = owner["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .split_once('/')
                .unwrap_or(("", owner["apiVersion"].as_str().unwrap_or_default()));
            let Some(res) = self.resources.iter().find(|r| {
                r.group == group && r.kind == owner["kind"] && r.version(version).is_some()
            }) else {
                return false;
            };
            if res.namespaced && key.namespace.is_empty() {
                return false;
            }
            let name = owner["name"].as_str().unwrap_or_default();
            let found = self.objects.get(&Key::new(res, Some(&key.namespace), name));
            found.is_none_or(|o| o["metadata"]["uid"] != owner["uid"])
        })
    }

    /// The garbage collector removes a dependent whose owners are all absent.
    fn collect_orphan(&mut self, key: &Key) {
        if self.orphaned(key) {
            self.delete_cascading(vec![key.clone()]);
        }
    }

    pub(crate) fn set_log(&mut self, namespace: &str, pod: &str, log: &str) {
        self.logs
            .insert((namespace.to_string(), pod.to_string()), log.to_string());
    }

    pub(crate) fn log(&self, namespace: &str, pod: &str) -> String {
        self.logs
            .get(&(namespace.to_string(), pod.to_string()))
            .cloned()
            .unwrap_or_default()
    }
}

/// Fields the API server refuses to change once set.
const IMMUTABLE: [(&str, &str, &[&str]); 2] = [
    ("batch", "jobs", &["selector", "template"]),
    ("apps", "deployments", &["selector"]),
];

/// What an update may not do: change an immutable field, or add a finalizer to an
/// object being deleted.
fn update_rules(res: &Resource, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (group, plural, fields) in IMMUTABLE {
        if res.group != group || res.plural != plural {
            continue;
        }
        for field in fields {
            let (before, after) = (&old["spec"][field], &new["spec"][field]);
            if before != after {
                errors.push(FieldError::new(
                    &format!("spec.{field}"),
                    "FieldValueInvalid",
                    format!("Invalid value: {after}: field is immutable"),
                ));
            }
        }
    }
    if old["metadata"].get("deletionTimestamp").is_some() {
        let before = old["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let added: Vec<&Value> = new["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            errors.push(FieldError::new(
                "metadata.finalizers",
                "FieldValueForbidden",
                format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    json!(added)
                ),
            ));
        }
    }
    errors
}

fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str())
}

fn namespace_key(name: &str) -> Key {
    Key {
        group: String::new(),
        plural: "namespaces".into(),
        namespace: String::new(),
        name: name.into(),
    }
}

fn is_namespace(res: &Resource) -> bool {
    res.group.is_empty() && res.plural == "namespaces"
}

fn is_crd(res: &Resource) -> bool {
    res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions"
}

/// A body naming another apiVersion or kind than the URL is refused.
fn check_type(object: &Value, res: &Resource, version: &str) -> Result<(), ApiError> {
    let expected = res.api_version(version);
    if let Some(given) = object["apiVersion"].as_str()
        && given != expected
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({given}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(given) = object["kind"].as_str()
        && given != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({given}) does not match the expected kind ({})",
            res.kind
        )));
    }
    Ok(())
}

/// Removes from `target` what a manager applied before (`previous`) and no longer
/// applies: leaves it dropped go, maps it dropped lose only what it had set in them.
fn drop_unapplied(target: &mut Value, previous: &Value, applied: &Value) {
    let (Some(target), Some(previous)) = (target.as_object_mut(), previous.as_object()) else {
        return;
    };
    let nothing = json!({});
    for (key, before) in previous {
        match (applied.get(key), before.is_object()) {
            (Some(now), _) => {
                if let Some(inner) = target.get_mut(key) {
                    drop_unapplied(inner, before, now);
                }
            }
            (None, true) => {
                if let Some(inner) = target.get_mut(key) {
                    drop_unapplied(inner, before, &nothing);
                }
            }
            (None, false) => {
                target.remove(key);
            }
        }
    }
}

/// What the API server fills in when a write leaves it out: a Deployment runs one
/// replica unless told otherwise.
fn default_fields(res: &Resource, object: &mut Value) {
    if res.group == "apps" && res.plural == "deployments" && object["spec"]["replicas"].is_null() {
        object["spec"]["replicas"] = json!(1);
    }
}

/// An apply body is YAML, JSON being a subset of it.
fn parse_apply(body: &[u8]) -> Result<Value, ApiError> {
    let object: Value = serde_json::from_slice(body).or_else(|_| {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid apply patch: {e}")))
    })?;
    if object.is_object() {
        Ok(object)
    } else {
        Err(ApiError::bad_request("an apply patch must be an object"))
    }
}
