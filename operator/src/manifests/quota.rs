//! The ResourceQuota and LimitRange of a deploy namespace: the same per-namespace
//! limits as embedded mode (`--max-running-memory-mb`, `--max-workloads`,
//! `--max-triggers`), enforced by the API server for whatever creates pods there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{metadata, tenant_labels};
use sless_api::validation::{CPU_MILLIS_MAX, DISK_MB_MAX, MEMORY_MB_MAX};
use sless_api::{DEFAULT_CPU_MILLIS, DEFAULT_DISK_MB, DEFAULT_MEMORY_MB};
use sless_core::model::deploy_namespace;

pub const QUOTA: &str = "sless-quota";
pub const LIMITS: &str = "sless-limits";

/// What one tenant's deploy namespace may hold (`sless operator` flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantQuota {
    /// MiB of memory the namespace's pods may request and be limited to, together.
    pub max_running_memory_mb: u64,
    /// Deployments and Services (one each per function or service).
    pub max_workloads: u64,
    /// CronJobs (one per cron trigger).
    pub max_triggers: u64,
}

impl Default for TenantQuota {
    fn default() -> Self {
        Self {
            max_running_memory_mb: sless_core::quota::DEFAULT_MAX_RUNNING_MEMORY_MB,
            max_workloads: sless_core::quota::Quotas::default().max_workloads,
            max_triggers: sless_core::quota::Quotas::default().max_triggers,
        }
    }
}

fn quantities(entries: &[(&str, String)]) -> BTreeMap<String, Quantity> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.clone())))
        .collect()
}

pub fn resource_quota(namespace: &str, quota: &TenantQuota) -> ResourceQuota {
    let memory = format!("{}Mi", quota.max_running_memory_mb);
    ResourceQuota {
        metadata: metadata(
            QUOTA,
            &deploy_namespace(namespace),
            tenant_labels(namespace),
            BTreeMap::new(),
        ),
        spec: Some(ResourceQuotaSpec {
            hard: Some(quantities(&[
                ("requests.memory", memory.clone()),
                ("limits.memory", memory),
                ("count/deployments.apps", quota.max_workloads.to_string()),
                ("services", quota.max_workloads.to_string()),
                ("count/cronjobs.batch", quota.max_triggers.to_string()),
            ])),
            ..ResourceQuotaSpec::default()
        }),
        ..ResourceQuota::default()
    }
}

/// Per container: at most what the API accepts for a function, and the API's
/// defaults for a container that names no limits (the quota on memory needs one).
pub fn limit_range(namespace: &str) -> LimitRange {
    LimitRange {
        metadata: metadata(
            LIMITS,
            &deploy_namespace(namespace),
            tenant_labels(namespace),
            BTreeMap::new(),
        ),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                max: Some(quantities(&[
                    ("memory", format!("{MEMORY_MB_MAX}Mi")),
                    ("cpu", format!("{CPU_MILLIS_MAX}m")),
                    ("ephemeral-storage", format!("{DISK_MB_MAX}Mi")),
                ])),
                default: Some(quantities(&[
                    ("memory", format!("{DEFAULT_MEMORY_MB}Mi")),
                    ("cpu", format!("{DEFAULT_CPU_MILLIS}m")),
                    ("ephemeral-storage", format!("{DEFAULT_DISK_MB}Mi")),
                ])),
                default_request: Some(quantities(&[
                    ("memory", format!("{DEFAULT_MEMORY_MB}Mi")),
                    ("cpu", "50m".to_string()),
                ])),
                ..LimitRangeItem::default()
            }],
        }),
    }
}
