//! The served resource types: built-in kinds plus those added by CRDs, and discovery.

use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub name: String,
    pub status: bool,
    pub schema: Option<Value>,
}

#[derive(Clone, Debug)]
pub(crate) struct Resource {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub versions: Vec<Version>,
    /// Set for resources defined by a CRD: the CRD's name.
    pub crd: Option<String>,
}

impl Resource {
    pub(crate) fn version(&self, name: &str) -> Option<&Version> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }
}

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    status: bool,
) -> Resource {
    Resource {
        group: group.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: Vec::new(),
        versions: vec![Version {
            name: version.into(),
            status,
            schema: None,
        }],
        crd: None,
    }
}

pub(crate) fn builtins() -> Vec<Resource> {
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, true),
        builtin("", "v1", "secrets", "Secret", true, false),
        builtin("", "v1", "services", "Service", true, true),
        builtin("", "v1", "pods", "Pod", true, true),
        builtin("", "v1", "events", "Event", true, false),
        builtin("", "v1", "configmaps", "ConfigMap", true, false),
        builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false),
        builtin("apps", "v1", "deployments", "Deployment", true, true),
        builtin("batch", "v1", "jobs", "Job", true, true),
        builtin("batch", "v1", "cronjobs", "CronJob", true, true),
        builtin(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            true,
            true,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            false,
        ),
        builtin("", "v1", "resourcequotas", "ResourceQuota", true, true),
        builtin("", "v1", "limitranges", "LimitRange", true, false),
        builtin("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        builtin(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            true,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            false,
        ),
        builtin("events.k8s.io", "v1", "events", "Event", true, false),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        ),
    ]
}

/// The resource a CRD object defines, or why it cannot be served.
pub(crate) fn from_crd(crd: &Value) -> Result<Resource, String> {
    let spec = &crd["spec"];
    let text = |v: &Value, what: &str| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("{what}: Required value"))
    };
    let group = text(&spec["group"], "spec.group")?;
    let plural = text(&spec["names"]["plural"], "spec.names.plural")?;
    let kind = text(&spec["names"]["kind"], "spec.names.kind")?;
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(
                "spec.scope: Unsupported value: supported values: \"Cluster\", \"Namespaced\""
                    .into(),
            );
        }
    };
    let expected = format!("{plural}.{group}");
    if crd["metadata"]["name"].as_str() != Some(expected.as_str()) {
        return Err(format!(
            "metadata.name: Invalid value: {}: must be spec.names.plural+\".\"+spec.group",
            crd["metadata"]["name"]
        ));
    }
    let versions: Vec<Version> = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"] != Value::Bool(false))
        .map(|v| Version {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            status: v["subresources"].get("status").is_some(),
            schema: v["schema"].get("openAPIV3Schema").cloned(),
        })
        .collect();
    if versions.is_empty() || versions.iter().any(|v| v.name.is_empty()) {
        return Err(
            "spec.versions: Invalid value: must have at least one named served version".into(),
        );
    }
    Ok(Resource {
        singular: spec["names"]["singular"]
            .as_str()
            .map_or_else(|| kind.to_lowercase(), str::to_string),
        short_names: spec["names"]["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        group,
        plural,
        kind,
        namespaced,
        versions,
        crd: crd["metadata"]["name"].as_str().map(str::to_string),
    })
}

/// The status a real API server reports once a CRD's names are accepted. Conditions
/// already reported are kept, so re-applying a CRD unchanged is no write.
pub(crate) fn crd_status(crd: &Value, now: &str) -> Value {
    let condition = |kind: &str, reason: &str| json!({"type": kind, "status": "True", "reason": reason, "lastTransitionTime": now, "message": ""});
    let conditions = match crd["status"].get("conditions") {
        Some(kept) if kept.is_array() => kept.clone(),
        _ => json!([
            condition("NamesAccepted", "NoConflicts"),
            condition("Established", "InitialNamesAccepted"),
        ]),
    };
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": conditions,
        "storedVersions": stored,
    })
}

/// Deployments serve the `scale` subresource (an `autoscaling/v1` Scale).
pub(crate) fn has_scale(res: &Resource) -> bool {
    res.group == "apps" && res.plural == "deployments"
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `APIResourceList` of one group/version.
pub(crate) fn resource_list(resources: &[Resource], group: &str, version: &str) -> Option<Value> {
    let mut entries = Vec::new();
    for r in resources.iter().filter(|r| r.group == group) {
        let Some(v) = r.version(version) else {
            continue;
        };
        entries.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS, "shortNames": r.short_names,
        }));
        if v.status {
            entries.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if has_scale(r) {
            entries.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": true,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if group.is_empty() && r.plural == "pods" {
            entries.push(json!({
                "name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"],
            }));
        }
    }
    if entries.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version, "resources": entries,
    }))
}

/// `APIGroup` entries of every named group, in first-registered order.
pub(crate) fn groups(resources: &[Resource]) -> Vec<Value> {
    let mut names: Vec<&str> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        if !names.contains(&r.group.as_str()) {
            names.push(&r.group);
        }
    }
    names
        .into_iter()
        .map(|name| group(resources, name))
        .collect()
}

pub(crate) fn group(resources: &[Resource], name: &str) -> Value {
    let mut versions: Vec<&str> = Vec::new();
    for r in resources.iter().filter(|r| r.group == name) {
        for v in &r.versions {
            if !versions.contains(&v.name.as_str()) {
                versions.push(&v.name);
            }
        }
    }
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": name,
        "versions": entries, "preferredVersion": entries.first(),
    })
}
