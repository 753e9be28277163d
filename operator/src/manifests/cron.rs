//! What triggers become: a CronJob that POSTs to the function through the data plane's
//! `/fn` (so the call is routed, timed and recorded as every call is), or an Ingress
//! when the cluster has no external URL for the `/fn` proxy.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PodSpec, Secret, SecretKeySelector,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{CURL_UID, metadata, one_shot_pod, restricted, restricted_pod, tenant_labels};
use crate::KubeConfig;
use crate::names::{FUNCTION_PORT, LABEL_FUNCTION, component_labels, cron_job_name, ingress_name};
use sless_core::auth::TRIGGER_TOKEN_HEADER;
use sless_core::model::{Kind, deploy_namespace};

pub const CRON_COMPONENT: &str = "cron";
pub const INGRESS_COMPONENT: &str = "ingress";
/// A call that gets no answer in this long is abandoned, when the function has no timeout.
const MAX_CALL_SECONDS: u32 = 900;

/// A cron trigger as its CronJob needs it.
pub struct CronTrigger<'a> {
    pub namespace: &'a str,
    pub trigger: &'a str,
    pub function: &'a str,
    pub schedule: &'a str,
    pub enabled: bool,
    /// The function's `timeoutSec`; 0 = no limit.
    pub timeout_sec: u32,
}

fn trigger_labels(
    namespace: &str,
    trigger: &str,
    function: &str,
    component: &str,
) -> BTreeMap<String, String> {
    let mut labels = component_labels(Kind::Trigger, namespace, trigger, component);
    labels.insert(LABEL_FUNCTION.to_string(), function.to_string());
    labels
}

/// The JSON body of a scheduled call (the embedded scheduler sends the same keys).
pub fn cron_body(trigger: &str, schedule: &str) -> String {
    serde_json::json!({"trigger": trigger, "type": "cron", "schedule": schedule}).to_string()
}

/// The Secret of a deploy namespace holding its cron pods' trigger token.
pub const TRIGGER_TOKEN_SECRET: &str = "sless-trigger-token";
const TRIGGER_TOKEN_KEY: &str = "token";
/// The cron container's variable holding the token; the kubelet puts it in the args.
const TRIGGER_TOKEN_ENV: &str = "SLESS_TRIGGER_TOKEN";

/// The curl arguments of one scheduled call: a POST to `/fn/<ns>/<function>/` of the
/// data plane, proven a cron fire by the tenant's token.
pub fn cron_args(cron: &CronTrigger, config: &KubeConfig) -> Vec<String> {
    let max_time = if cron.timeout_sec == 0 {
        MAX_CALL_SECONDS
    } else {
        cron.timeout_sec + 5
    };
    let url = format!(
        "{}/fn/{}/{}/",
        config.data_plane_url(),
        cron.namespace,
        cron.function
    );
    vec![
        "-fsS".into(),
        "--max-time".into(),
        max_time.to_string(),
        "-X".into(),
        "POST".into(),
        "-H".into(),
        "content-type: application/json".into(),
        "-H".into(),
        format!("x-sless-trigger: {}", cron.trigger),
        "-H".into(),
        format!("{TRIGGER_TOKEN_HEADER}: $({TRIGGER_TOKEN_ENV})"),
        "--data".into(),
        cron_body(cron.trigger, cron.schedule),
        url,
    ]
}

/// The token of a tenant's cron pods, in their deploy namespace.
pub fn trigger_token_secret(namespace: &str, config: &KubeConfig) -> Secret {
    Secret {
        metadata: metadata(
            TRIGGER_TOKEN_SECRET,
            &deploy_namespace(namespace),
            tenant_labels(namespace),
            BTreeMap::new(),
        ),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            TRIGGER_TOKEN_KEY.to_string(),
            ByteString(config.trigger_key.token(namespace).into_bytes()),
        )])),
        ..Secret::default()
    }
}

pub fn cron_job(cron: &CronTrigger, config: &KubeConfig) -> CronJob {
    let labels = trigger_labels(cron.namespace, cron.trigger, cron.function, CRON_COMPONENT);
    let deadline = i64::from(if cron.timeout_sec == 0 {
        MAX_CALL_SECONDS
    } else {
        cron.timeout_sec + 30
    });
    CronJob {
        metadata: metadata(
            &cron_job_name(cron.trigger),
            &deploy_namespace(cron.namespace),
            labels.clone(),
            BTreeMap::new(),
        ),
        spec: Some(CronJobSpec {
            schedule: cron.schedule.to_string(),
            // enabled=false stops the trigger in place.
            suspend: Some(!cron.enabled),
            concurrency_policy: Some("Forbid".into()),
            starting_deadline_seconds: Some(300),
            successful_jobs_history_limit: Some(1),
            failed_jobs_history_limit: Some(3),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(JobSpec {
                    // One call per tick: a retry would call the handler twice.
                    backoff_limit: Some(0),
                    active_deadline_seconds: Some(deadline),
                    ttl_seconds_after_finished: Some(3600),
                    template: one_shot_pod(
                        labels,
                        PodSpec {
                            security_context: Some(restricted_pod(CURL_UID)),
                            containers: vec![Container {
                                name: "call".into(),
                                image: Some(config.images.curl.clone()),
                                args: Some(cron_args(cron, config)),
                                env: Some(vec![EnvVar {
                                    name: TRIGGER_TOKEN_ENV.into(),
                                    value_from: Some(EnvVarSource {
                                        secret_key_ref: Some(SecretKeySelector {
                                            name: TRIGGER_TOKEN_SECRET.into(),
                                            key: TRIGGER_TOKEN_KEY.into(),
                                            optional: Some(false),
                                        }),
                                        ..EnvVarSource::default()
                                    }),
                                    ..EnvVar::default()
                                }]),
                                security_context: Some(restricted(CURL_UID, true)),
                                ..Container::default()
                            }],
                            ..PodSpec::default()
                        },
                    ),
                    ..JobSpec::default()
                }),
            },
            ..CronJobSpec::default()
        }),
        ..CronJob::default()
    }
}

/// `/fn/<ns>/<fn>/...` straight to the function's Service, for clusters without an
/// external URL. The path is rewritten as the proxy would (the function sees `/...`);
/// the annotations are ingress-nginx's, other controllers need their own.
pub fn http_ingress(
    namespace: &str,
    trigger: &str,
    function: &str,
    config: &KubeConfig,
) -> Ingress {
    let labels = trigger_labels(namespace, trigger, function, INGRESS_COMPONENT);
    let annotations = BTreeMap::from([
        (
            "nginx.ingress.kubernetes.io/rewrite-target".to_string(),
            "/$2".to_string(),
        ),
        (
            "nginx.ingress.kubernetes.io/use-regex".to_string(),
            "true".to_string(),
        ),
    ]);
    Ingress {
        metadata: metadata(
            &ingress_name(trigger),
            &deploy_namespace(namespace),
            labels,
            annotations,
        ),
        spec: Some(IngressSpec {
            ingress_class_name: config.ingress.class.clone(),
            rules: Some(vec![IngressRule {
                host: config.ingress.host.clone(),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(format!("/fn/{namespace}/{function}(/|$)(.*)")),
                        path_type: "ImplementationSpecific".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: function.to_string(),
                                port: Some(ServiceBackendPort {
                                    number: Some(FUNCTION_PORT),
                                    ..ServiceBackendPort::default()
                                }),
                            }),
                            ..IngressBackend::default()
                        },
                    }],
                }),
            }]),
            ..IngressSpec::default()
        }),
        ..Ingress::default()
    }
}
