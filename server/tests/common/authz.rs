//! What a real API server would decide of a component's requests, which the emulator
//! does not: RBAC from the shipped manifests (plus the RoleBindings the component made
//! in the cluster), and the shipped ValidatingAdmissionPolicies, whose CEL is evaluated
//! with a CEL interpreter.

use std::path::Path;

use cel::{Context, Program};
use kube_emulator::RequestRecord;
use serde::Deserialize as _;
use serde_json::{Value, json};

/// The objects of `operator/deploy/<file>`.
pub fn install_documents(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../operator/deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap())
        .filter(|object| !object.is_null())
        .collect()
}

/// What one request asks of the authorizer.
#[derive(Clone, Debug)]
pub struct Need {
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Need {
    /// As the API server's authorizer derives it; `None` for discovery, which every
    /// user may read.
    pub fn of(request: &RequestRecord) -> Option<Need> {
        let parts: Vec<&str> = request.path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", "v1", rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, inner @ ..] if !inner.is_empty() => {
                (Some(namespace.to_string()), inner)
            }
            all => (None, all),
        };
        let (resource, name) = match rest {
            [] => return None,
            [resource] => (resource.to_string(), None),
            [resource, name] => (resource.to_string(), Some(name.to_string())),
            [resource, name, sub] => (format!("{resource}/{sub}"), Some(name.to_string())),
            _ => panic!("an unexpected path {}", request.path),
        };
        let watch = request
            .query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let verb = match (request.method.as_str(), name.is_some()) {
            ("GET", false) if watch => "watch",
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            (method, _) => panic!("an unexpected method {method}"),
        };
        // A namespace itself is cluster-scoped: `namespaces/<name>` names it.
        let (namespace, name) = match (resource.as_str(), namespace, name) {
            ("namespaces", None, name) => (name.clone(), name),
            (_, namespace, name) => (namespace, name),
        };
        Some(Need {
            group: group.to_string(),
            resource,
            verb: verb.to_string(),
            namespace,
            name,
        })
    }
}

/// One rule of a role, where it applies (`None`: everywhere).
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
    namespace: Option<String>,
}

impl Rule {
    fn allows(&self, need: &Need) -> bool {
        let has = |list: &[String], item: &str| list.iter().any(|i| i == item || i == "*");
        has(&self.groups, &need.group)
            && has(&self.resources, &need.resource)
            && has(&self.verbs, &need.verb)
            && (self.names.is_empty() || need.name.as_deref().is_some_and(|n| has(&self.names, n)))
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| need.namespace.as_ref() == Some(ns))
    }
}

/// The permissions of one service account.
pub struct Rbac {
    rules: Vec<Rule>,
}

impl Rbac {
    /// What `documents` (the install) and `cluster_bindings` (RoleBindings read from the
    /// cluster) grant the service account `namespace/name`: ClusterRoles through
    /// ClusterRoleBindings everywhere, Roles and ClusterRoles through RoleBindings in the
    /// binding's namespace.
    pub fn of(
        documents: &[Value],
        cluster_bindings: &[Value],
        namespace: &str,
        name: &str,
    ) -> Rbac {
        let binds_us = |binding: &Value| {
            binding["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == name
                        && s["namespace"] == namespace
                })
            })
        };
        let role = |kind: &str, role_name: &str, role_namespace: Option<&str>| {
            documents
                .iter()
                .find(|o| {
                    o["kind"] == kind
                        && o["metadata"]["name"] == role_name
                        && o["metadata"]["namespace"].as_str() == role_namespace
                })
                .unwrap_or_else(|| panic!("{kind} {role_name} is not in the install"))
        };
        let mut rules = Vec::new();
        for binding in documents.iter().chain(cluster_bindings) {
            let (scope, role) = match binding["kind"].as_str() {
                Some("ClusterRoleBinding") if binds_us(binding) => (
                    None,
                    role(
                        "ClusterRole",
                        binding["roleRef"]["name"].as_str().unwrap(),
                        None,
                    ),
                ),
                Some("RoleBinding") if binds_us(binding) => {
                    let at = binding["metadata"]["namespace"].as_str().unwrap();
                    let role_name = binding["roleRef"]["name"].as_str().unwrap();
                    let role = match binding["roleRef"]["kind"].as_str() {
                        Some("ClusterRole") => role("ClusterRole", role_name, None),
                        _ => role("Role", role_name, Some(at)),
                    };
                    (Some(at.to_string()), role)
                }
                _ => continue,
            };
            for rule in role["rules"].as_array().unwrap() {
                rules.push(Rule {
                    groups: strings(&rule["apiGroups"]),
                    resources: strings(&rule["resources"]),
                    verbs: strings(&rule["verbs"]),
                    names: strings(&rule["resourceNames"]),
                    namespace: scope.clone(),
                });
            }
        }
        Rbac { rules }
    }

    pub fn allows(&self, need: &Need) -> bool {
        self.rules.iter().any(|rule| rule.allows(need))
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// One write as admission sees it.
pub struct Write {
    pub username: String,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    pub group: String,
    pub resource: String,
    pub sub_resource: String,
    pub namespace: Option<String>,
    pub object: Value,
    pub old_object: Value,
    pub namespace_object: Value,
}

struct Policy {
    name: String,
    /// (groups, resources, operations)
    rules: Vec<(Vec<String>, Vec<String>, Vec<String>)>,
    conditions: Vec<Program>,
    validations: Vec<(Program, String)>,
}

/// The install's ValidatingAdmissionPolicies (all bound with `Deny`).
pub struct Admission {
    policies: Vec<Policy>,
}

impl Admission {
    pub fn shipped() -> Admission {
        let documents = install_documents("admission.yaml");
        let bound: Vec<&str> = documents
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
            .inspect(|b| assert_eq!(b["spec"]["validationActions"], json!(["Deny"])))
            .map(|b| b["spec"]["policyName"].as_str().unwrap())
            .collect();
        let compile = |expression: &Value| {
            let source = expression.as_str().unwrap();
            Program::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"))
        };
        let policies = documents
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .map(|policy| {
                let name = policy["metadata"]["name"].as_str().unwrap().to_string();
                assert!(bound.contains(&name.as_str()), "{name} is not bound");
                let spec = &policy["spec"];
                assert_eq!(spec["failurePolicy"], "Fail", "{name}");
                Policy {
                    rules: spec["matchConstraints"]["resourceRules"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| {
                            (
                                strings(&r["apiGroups"]),
                                strings(&r["resources"]),
                                strings(&r["operations"]),
                            )
                        })
                        .collect(),
                    conditions: spec["matchConditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| compile(&c["expression"]))
                        .collect(),
                    validations: spec["validations"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| {
                            let message = v["message"]
                                .as_str()
                                .or(v["messageExpression"].as_str())
                                .unwrap()
                                .to_string();
                            (compile(&v["expression"]), message)
                        })
                        .collect(),
                    name,
                }
            })
            .collect();
        Admission { policies }
    }

    /// `Err` names the policy and the validation that denied `write`.
    pub fn review(&self, write: &Write) -> Result<(), String> {
        let resource = if write.sub_resource.is_empty() {
            write.resource.clone()
        } else {
            format!("{}/{}", write.resource, write.sub_resource)
        };
        let mut context = Context::default();
        let request = json!({
            "operation": write.operation,
            "namespace": write.namespace.clone().unwrap_or_default(),
            "userInfo": {"username": write.username},
            "resource": {"group": write.group, "version": "v1", "resource": write.resource},
            "subResource": write.sub_resource,
        });
        for (name, value) in [
            ("request", &request),
            ("object", &write.object),
            ("oldObject", &write.old_object),
            ("namespaceObject", &write.namespace_object),
        ] {
            context.add_variable(name, value.clone()).unwrap();
        }
        let is_true = |program: &Program, what: &str| match program.execute(&context) {
            Ok(cel::Value::Bool(b)) => b,
            other => panic!("{what} evaluated to {other:?}"),
        };
        for policy in &self.policies {
            let matches = policy.rules.iter().any(|(groups, resources, operations)| {
                groups.contains(&write.group)
                    && resources.contains(&resource)
                    && operations.iter().any(|o| o == write.operation)
            });
            if !matches
                || !policy
                    .conditions
                    .iter()
                    .all(|c| is_true(c, &format!("{} condition", policy.name)))
            {
                continue;
            }
            for (validation, message) in &policy.validations {
                if !is_true(validation, &policy.name) {
                    return Err(format!("{}: {message}", policy.name));
                }
            }
        }
        Ok(())
    }

    /// Whether some policy covers writes of `group`/`resource` (with its subresource).
    pub fn covers(&self, group: &str, resource: &str) -> bool {
        self.policies.iter().any(|p| {
            p.rules.iter().any(|(groups, resources, _)| {
                groups.iter().any(|g| g == group) && resources.iter().any(|r| r == resource)
            })
        })
    }
}

/// The `apiVersion` of a request path (`/api/v1/...` → `v1`, `/apis/g/v/...` → `g/v`).
fn api_version(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", version, ..] => version.to_string(),
        ["apis", group, version, ..] => format!("{group}/{version}"),
        _ => panic!("not a resource path: {path}"),
    }
}

/// Asserts that every request `client` made of `emu` is one a real API server lets
/// through for the service account `sless-system/<account>`: allowed by the roles of
/// `rbac_files` and the RoleBindings now in the cluster, and, for writes, admitted by
/// the shipped admission policies. Returns what was asked.
pub fn assert_authorized(
    emu: &kube_emulator::Emulator,
    client: &str,
    rbac_files: &[&str],
    account: &str,
) -> Vec<Need> {
    let documents: Vec<Value> = rbac_files
        .iter()
        .flat_map(|f| install_documents(f))
        .collect();
    let bindings = emu.list("rbac.authorization.k8s.io/v1", "rolebindings", None);
    let rbac = Rbac::of(&documents, &bindings, "sless-system", account);
    let admission = Admission::shipped();
    let username = format!("system:serviceaccount:sless-system:{account}");
    let mut needs = Vec::new();
    for request in emu
        .requests()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some(client))
    {
        let Some(need) = Need::of(&request) else {
            continue;
        };
        let what = format!("{} {}?{}", request.method, request.path, request.query);
        assert!(
            rbac.allows(&need),
            "its RBAC does not allow {need:?}: {what}"
        );
        if request.is_write() {
            let operation = match request.method.as_str() {
                "POST" => "CREATE",
                "DELETE" => "DELETE",
                _ => "UPDATE",
            };
            let (resource, sub_resource) = need
                .resource
                .split_once('/')
                .map(|(r, s)| (r.to_string(), s.to_string()))
                .unwrap_or((need.resource.clone(), String::new()));
            let namespaced = resource != "namespaces";
            let name = need.name.as_deref().or(request.created_name.as_deref());
            let stored = name.and_then(|name| {
                let namespace = if namespaced {
                    need.namespace.as_deref()
                } else {
                    None
                };
                emu.get(&api_version(&request.path), &resource, namespace, name)
            });
            let object = match operation {
                "DELETE" => Value::Null,
                _ => stored.clone().unwrap_or_else(
                    || json!({"metadata": {"name": name, "namespace": need.namespace}}),
                ),
            };
            let old_object = match operation {
                "CREATE" => Value::Null,
                _ => stored.unwrap_or(Value::Null),
            };
            let namespace_object = match (namespaced, &need.namespace) {
                (true, Some(ns)) => emu.get("v1", "namespaces", None, ns).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            let write = Write {
                username: username.clone(),
                operation,
                group: need.group.clone(),
                resource,
                sub_resource,
                namespace: need.namespace.clone().filter(|_| namespaced),
                object,
                old_object,
                namespace_object,
            };
            if let Err(denied) = admission.review(&write) {
                panic!("the admission policies deny {what}: {denied}");
            }
        }
        needs.push(need);
    }
    needs
}
