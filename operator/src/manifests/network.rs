//! The NetworkPolicies of a deploy namespace (docs/kubernetes.md, "Tenant boundaries"):
//! everything denied, then only what sless needs allowed. Ingress to functions comes
//! from the data plane (the operator's `/fn`, the dispatcher) and, when set, the
//! ingress controller's namespace; cron pods reach only the data plane; egress follows each
//! workload's `egress` field. NetworkPolicy knows no DNS names, so an allow-list entry
//! by name cannot be enforced and is not allowed.

use std::collections::BTreeMap;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::build::COMPONENT as BUILD_COMPONENT;
use super::cron::CRON_COMPONENT;
use super::{metadata, tenant_labels};
use crate::KubeConfig;
use crate::names::{FUNCTION_PORT, LABEL_COMPONENT, LABEL_KIND, LABEL_NAME, component_labels, fit};
use sless_api::{Egress, EgressRule};
use sless_core::model::{Kind, build_namespace, deploy_namespace};

pub const DEFAULT_DENY: &str = "sless-default-deny";
pub const DATA_PLANE: &str = "sless-data-plane";
pub const CRON_EGRESS: &str = "sless-cron-egress";
pub const BUILD_BOUNDARY: &str = "sless-build";
/// The component label of a workload's or a job's egress policy.
pub const EGRESS_COMPONENT: &str = "egress";
/// The pods of the data plane in the operator's namespace (`operator/deploy/`).
pub const DATA_PLANE_PODS: [&str; 2] = ["sless-api", "sless-dispatcher"];
/// The port the data plane's pods serve the API and `/fn` on.
const DATA_PLANE_PORT: i32 = 8080;
const APP_NAME: &str = "app.kubernetes.io/name";
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

/// Never reachable, even when listed: cloud metadata endpoints (AWS, GCP, Azure, and
/// AWS's IPv6 one).
pub const METADATA: [&str; 2] = ["169.254.169.254/32", "fd00:ec2::254/128"];
/// What `internet` leaves out: private, shared, loopback, link-local (metadata),
/// multicast and reserved ranges, so other tenants' pods, the operator and an
/// in-cluster S3 are out of reach too.
const NOT_INTERNET_V4: [&str; 9] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];
const NOT_INTERNET_V6: [&str; 5] = ["::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"];

fn policy(
    name: &str,
    namespace: &str,
    labels: BTreeMap<String, String>,
    spec: NetworkPolicySpec,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: metadata(name, namespace, labels, BTreeMap::new()),
        spec: Some(spec),
    }
}

fn select(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..LabelSelector::default()
    }
}

fn namespace_named(name: &str) -> LabelSelector {
    select(&[(NAMESPACE_NAME, name)])
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(port)),
        ..NetworkPolicyPort::default()
    }
}

/// Every pod of the deploy namespace: no traffic in or out but what another policy
/// allows.
pub fn default_deny(namespace: &str) -> NetworkPolicy {
    policy(
        DEFAULT_DENY,
        &deploy_namespace(namespace),
        tenant_labels(namespace),
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..NetworkPolicySpec::default()
        },
    )
}

/// Calls to functions on 8080: from the data plane's pods and the ingress controller's
/// namespace (when configured).
pub fn data_plane_ingress(namespace: &str, config: &KubeConfig) -> NetworkPolicy {
    let mut from = vec![NetworkPolicyPeer {
        namespace_selector: Some(namespace_named(&config.operator_namespace)),
        pod_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: APP_NAME.into(),
                operator: "In".into(),
                values: Some(DATA_PLANE_PODS.map(String::from).to_vec()),
            }]),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }];
    if let Some(ingress_ns) = &config.ingress.namespace {
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(namespace_named(ingress_ns)),
            ..NetworkPolicyPeer::default()
        });
    }
    policy(
        DATA_PLANE,
        &deploy_namespace(namespace),
        tenant_labels(namespace),
        NetworkPolicySpec {
            pod_selector: Some(select(&[(LABEL_COMPONENT, super::workload::COMPONENT)])),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![tcp(FUNCTION_PORT)]),
            }]),
            ..NetworkPolicySpec::default()
        },
    )
}

/// Cron pods resolve the data plane's Service name and call its `/fn` (the API pods
/// in the operator's namespace, on 8080); functions are out of their reach.
pub fn cron_egress(namespace: &str, config: &KubeConfig) -> NetworkPolicy {
    policy(
        CRON_EGRESS,
        &deploy_namespace(namespace),
        tenant_labels(namespace),
        NetworkPolicySpec {
            pod_selector: Some(select(&[(LABEL_COMPONENT, CRON_COMPONENT)])),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(vec![
                dns(),
                NetworkPolicyEgressRule {
                    to: Some(vec![NetworkPolicyPeer {
                        namespace_selector: Some(namespace_named(&config.operator_namespace)),
                        pod_selector: Some(select(&[(APP_NAME, DATA_PLANE_PODS[0])])),
                        ..NetworkPolicyPeer::default()
                    }]),
                    ports: Some(vec![tcp(DATA_PLANE_PORT)]),
                },
            ]),
            ..NetworkPolicySpec::default()
        },
    )
}

/// Every pod of a build namespace: nothing comes in; out, only the cluster DNS and what
/// fetching the context and pushing the image need ([`KubeConfig::build_endpoints`]:
/// S3, the registries, an external BuildKit daemon). What the tenant's install steps
/// may reach besides is each build's [`build_egress_policy`].
pub fn build_boundary(namespace: &str, config: &KubeConfig) -> NetworkPolicy {
    let mut egress = vec![dns()];
    egress.extend(config.build_endpoints.iter().map(|e| endpoint_rule(e)));
    policy(
        BUILD_BOUNDARY,
        &build_namespace(namespace),
        tenant_labels(namespace),
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            egress: Some(egress),
            ..NetworkPolicySpec::default()
        },
    )
}

/// Where one workload's (or self-contained job's) build pods may connect during its
/// install steps: its own `egress`, as its running pods ([`egress_policy`]).
pub fn build_egress_policy(
    kind: Kind,
    namespace: &str,
    name: &str,
    egress: &Egress,
) -> NetworkPolicy {
    let mut policy = egress_policy(kind, namespace, name, BUILD_COMPONENT, egress);
    // A Function and a FunctionJob may share a name; their builds share a namespace.
    policy.metadata.name = Some(fit(name, &format!("-{}-build-egress", kind.noun()), 63));
    policy.metadata.namespace = Some(build_namespace(namespace));
    policy
}

/// A `host[:port]` or URL the build pods need, as a rule: an IP on its port; a Service
/// name (`<svc>.<ns>.svc[.<domain>]`) as its namespace's pods on the port; any other
/// name, which a NetworkPolicy cannot resolve, as every address but the cloud metadata
/// endpoints, on its port only. The port is the URL's, else 443 (80 for `http://`).
pub fn endpoint_rule(endpoint: &str) -> NetworkPolicyEgressRule {
    let (default_port, rest): (u16, &str) = match endpoint.split_once("://") {
        Some(("http", rest)) => (80, rest),
        Some((_, rest)) => (443, rest),
        None => (443, endpoint),
    };
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && port.parse::<u16>().is_ok() => {
            (host, port.parse().unwrap_or(default_port))
        }
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let to = if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: IpNet::from(ip).to_string(),
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        }]
    } else if let Some(service_ns) = service_namespace(host) {
        vec![NetworkPolicyPeer {
            namespace_selector: Some(namespace_named(service_ns)),
            ..NetworkPolicyPeer::default()
        }]
    } else {
        ["0.0.0.0/0", "::/0"]
            .into_iter()
            .map(|cidr| NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: cidr.into(),
                    except: Some(
                        METADATA
                            .iter()
                            .filter(|m| m.contains(':') == cidr.contains(':'))
                            .map(|m| m.to_string())
                            .collect(),
                    ),
                }),
                ..NetworkPolicyPeer::default()
            })
            .collect()
    };
    NetworkPolicyEgressRule {
        to: Some(to),
        ports: Some(vec![tcp(i32::from(port))]),
    }
}

/// The namespace of an in-cluster Service name `<svc>.<ns>.svc[.<cluster domain>]`.
fn service_namespace(host: &str) -> Option<&str> {
    let mut labels = host.trim_end_matches('.').split('.');
    let (_service, namespace, svc) = (labels.next()?, labels.next()?, labels.next()?);
    (svc == "svc").then_some(namespace)
}

/// The cluster DNS (kube-dns / CoreDNS in kube-system).
fn dns() -> NetworkPolicyEgressRule {
    let port = |protocol: &str| NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(53)),
        ..NetworkPolicyPort::default()
    };
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(namespace_named("kube-system")),
            pod_selector: Some(select(&[("k8s-app", "kube-dns")])),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![port("UDP"), port("TCP")]),
    }
}

/// Where the pods of one workload (`component` `workload`) or one job's runs
/// (`run`) may connect, from its `egress` field:
/// - `internet`: DNS and every public address (never private, link-local or metadata
///   ranges);
/// - `none`: nothing (answers to calls it receives still go back);
/// - a list: each address or CIDR entry, on its port (TCP) or every port; entries by
///   name cannot be expressed and are left out (no DNS either).
pub fn egress_policy(
    kind: Kind,
    namespace: &str,
    name: &str,
    component: &str,
    egress: &Egress,
) -> NetworkPolicy {
    let labels = component_labels(kind, namespace, name, EGRESS_COMPONENT);
    let pods = [
        (LABEL_NAME, name),
        (LABEL_KIND, kind.noun()),
        (LABEL_COMPONENT, component),
    ];
    let rules = match egress {
        Egress::None => Vec::new(),
        Egress::Internet => vec![dns(), internet()],
        Egress::Allow(entries) => entries.iter().filter_map(allowed).collect(),
    };
    policy(
        &fit(name, &format!("-{component}-egress"), 63),
        &deploy_namespace(namespace),
        labels,
        NetworkPolicySpec {
            pod_selector: Some(select(&pods)),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(rules),
            ..NetworkPolicySpec::default()
        },
    )
}

/// The allow-list entries by name, which a NetworkPolicy cannot express (so they are
/// blocked), as the user wrote them.
pub fn unenforceable(egress: &Egress) -> Vec<String> {
    match egress {
        Egress::Allow(entries) => entries
            .iter()
            .filter(|e| matches!(e, EgressRule::Host { .. }))
            .map(ToString::to_string)
            .collect(),
        Egress::Internet | Egress::None => Vec::new(),
    }
}

fn internet() -> NetworkPolicyEgressRule {
    let block = |cidr: &str, except: &[&str]| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: Some(except.iter().map(|e| e.to_string()).collect()),
        }),
        ..NetworkPolicyPeer::default()
    };
    NetworkPolicyEgressRule {
        to: Some(vec![
            block("0.0.0.0/0", &NOT_INTERNET_V4),
            block("::/0", &NOT_INTERNET_V6),
        ]),
        ports: None,
    }
}

/// One allow-list entry as a rule: its network without the metadata endpoints; `None`
/// for a name, or for an entry that is nothing but a metadata endpoint.
fn allowed(entry: &EgressRule) -> Option<NetworkPolicyEgressRule> {
    let EgressRule::Net { net, port } = entry else {
        return None;
    };
    let metadata: Vec<IpNet> = METADATA.iter().filter_map(|m| m.parse().ok()).collect();
    if metadata.iter().any(|m| m.contains(net)) {
        return None;
    }
    let except: Vec<String> = metadata
        .iter()
        .filter(|m| net.contains(*m))
        .map(ToString::to_string)
        .collect();
    Some(NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: net.to_string(),
                except: (!except.is_empty()).then_some(except),
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: port.map(|p| vec![tcp(i32::from(p))]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(egress: &str) -> Vec<NetworkPolicyEgressRule> {
        let egress: Egress = egress.parse().unwrap();
        egress_policy(Kind::Function, "ns", "f", "workload", &egress)
            .spec
            .unwrap()
            .egress
            .unwrap()
    }

    fn blocks(rules: &[NetworkPolicyEgressRule]) -> Vec<(String, Vec<String>)> {
        rules
            .iter()
            .flat_map(|r| r.to.clone().unwrap_or_default())
            .filter_map(|p| p.ip_block)
            .map(|b| (b.cidr, b.except.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn internet_is_public_addresses_and_dns_only() {
        let rules = rules("internet");
        let blocks = blocks(&rules);
        assert_eq!(blocks[0].0, "0.0.0.0/0");
        for private in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "169.254.0.0/16",
        ] {
            assert!(blocks[0].1.contains(&private.to_string()), "{private}");
        }
        assert!(blocks[1].1.contains(&"fc00::/7".to_string()));
        assert_eq!(rules.len(), 2, "DNS and the internet");
    }

    #[test]
    fn builds_reach_the_dns_and_their_endpoints_only() {
        let mut config = KubeConfig::new("registry.example.com/sless");
        config.build_endpoints = vec![
            "http://minio.minio.svc.cluster.local:9000".into(),
            "registry.example.com".into(),
            "10.1.2.3:5000".into(),
        ];
        let policy = build_boundary("ns", &config).spec.unwrap();
        let rules = policy.egress.unwrap();
        assert_eq!(rules.len(), 4, "DNS and three endpoints");
        let port = |rule: &NetworkPolicyEgressRule| rule.ports.as_ref().unwrap()[0].port.clone();
        // An in-cluster Service: its namespace's pods, on its port.
        let minio = &rules[1].to.as_ref().unwrap()[0];
        assert_eq!(
            minio
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()[NAMESPACE_NAME],
            "minio"
        );
        assert_eq!(port(&rules[1]), Some(IntOrString::Int(9000)));
        // A name: anywhere but cloud metadata, on 443 only.
        assert_eq!(
            blocks(std::slice::from_ref(&rules[2])),
            [
                (
                    "0.0.0.0/0".to_string(),
                    vec!["169.254.169.254/32".to_string()]
                ),
                ("::/0".to_string(), vec!["fd00:ec2::254/128".to_string()]),
            ]
        );
        assert_eq!(port(&rules[2]), Some(IntOrString::Int(443)));
        assert_eq!(
            blocks(std::slice::from_ref(&rules[3])),
            [("10.1.2.3/32".to_string(), vec![])]
        );
        assert_eq!(port(&rules[3]), Some(IntOrString::Int(5000)));
        assert!(policy.ingress.is_none(), "nothing comes in");
    }

    #[test]
    fn a_build_gets_its_workload_s_egress_in_the_build_namespace() {
        let none = build_egress_policy(Kind::Function, "ns", "f", &Egress::None);
        assert_eq!(none.metadata.namespace.as_deref(), Some("sless-build-ns"));
        assert_eq!(
            none.metadata.name.as_deref(),
            Some("f-function-build-egress")
        );
        let spec = none.spec.unwrap();
        assert!(spec.egress.unwrap().is_empty());
        let pods = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(pods[LABEL_COMPONENT], "build");
        let internet = build_egress_policy(Kind::FunctionJob, "ns", "f", &Egress::Internet);
        assert_eq!(
            internet.metadata.name.as_deref(),
            Some("f-job-build-egress")
        );
        assert_eq!(internet.spec.unwrap().egress.unwrap().len(), 2);
    }

    #[test]
    fn none_allows_nothing() {
        assert!(rules("none").is_empty());
    }

    #[test]
    fn a_list_allows_its_addresses_never_metadata_and_never_names() {
        let rules = rules("10.0.0.5:5432,169.254.0.0/16,169.254.169.254,api.example.com:443");
        let blocks = blocks(&rules);
        assert_eq!(
            blocks,
            [
                ("10.0.0.5/32".to_string(), vec![]),
                (
                    "169.254.0.0/16".to_string(),
                    vec!["169.254.169.254/32".to_string()]
                ),
            ]
        );
        assert_eq!(
            rules[0].ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(5432))
        );
        assert_eq!(rules[1].ports, None);
    }
}
