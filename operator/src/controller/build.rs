//! The build step shared by Functions, Services and self-contained FunctionJobs: one
//! build Job per upload, polled until it ends.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;

use super::{Context, Error, JobOutcome, Result, apply, delete_labelled, job_outcome};
use crate::manifests::build::{COMPONENT, STEPS};
use crate::manifests::{self, BuildJob};
use crate::names::{build_job_name, component_labels, selector};
use crate::store::is_already_exists;
use sless_api::Egress;
use sless_core::logs::last_bytes;
use sless_core::model::{Kind, build_namespace};
use sless_core::upload::version_of;

/// How much of a failed build's log the status carries.
const LOG_TAIL_BYTES: usize = 2000;

pub(super) struct BuildTarget<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub s3_key: &'a str,
    pub image: &'a str,
    /// Where its install steps may connect: the workload's (or job's) own egress.
    pub egress: &'a Egress,
}

pub(super) enum BuildState {
    Running { job: String },
    Succeeded,
    Failed { message: String },
}

/// Starts the build of `target.s3_key` if it has no Job yet, or reports how it went.
pub(super) async fn build(ctx: &Context, target: &BuildTarget<'_>) -> Result<BuildState> {
    let build_ns = build_namespace(target.namespace);
    ctx.prepare_build_namespace(target.namespace, &build_ns)
        .await?;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &build_ns);
    let job_name = build_job_name(target.name, target.s3_key);
    // A newer upload supersedes builds of older ones.
    let builds = selector(&component_labels(
        target.kind,
        target.namespace,
        target.name,
        COMPONENT,
    ));
    delete_labelled(&jobs, &builds, Some(&job_name)).await?;

    let Some(job) = jobs.get_opt(&job_name).await? else {
        let url = ctx
            .contexts
            .presigned_get(target.s3_key, ctx.config.context_url_ttl)
            .await
            .map_err(Error::PresignError)?;
        // Before the build's pod exists, so its install steps never run unconstrained.
        let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &build_ns);
        apply(
            &policies,
            &manifests::build_egress_policy(
                target.kind,
                target.namespace,
                target.name,
                target.egress,
            ),
        )
        .await?;
        let manifest = manifests::build_job(
            &BuildJob {
                kind: target.kind,
                namespace: target.namespace,
                name: target.name,
                s3_key: target.s3_key,
                context_url: &url,
                image: target.image,
            },
            &ctx.config,
        );
        match jobs.create(&PostParams::default(), &manifest).await {
            Ok(_) => tracing::info!(
                kind = %target.kind, namespace = %target.namespace, name = %target.name,
                job = %job_name, "build started"
            ),
            Err(e) if is_already_exists(&e) => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(BuildState::Running { job: job_name });
    };
    match job_outcome(&job) {
        JobOutcome::Running => Ok(BuildState::Running { job: job_name }),
        JobOutcome::Succeeded => Ok(BuildState::Succeeded),
        JobOutcome::Failed { reason } => {
            // The steps run one after the other: the last one that printed failed.
            let mut log = String::new();
            for step in STEPS.iter().rev() {
                log = ctx
                    .logs
                    .job_log(&build_ns, &job_name, step)
                    .await
                    .unwrap_or_default();
                if !log.trim().is_empty() {
                    break;
                }
            }
            let failed = format!(
                "build of version {} failed ({reason})",
                version_of(target.s3_key)
            );
            // The cause first: the line `/fn` callers, describe and deploy show.
            let mut message = match sless_api::text::error_line(&log) {
                Some(cause) => format!("{cause}\n{failed}"),
                None => failed,
            };
            if !log.trim().is_empty() {
                message.push('\n');
                message.push_str(&last_bytes(&log, LOG_TAIL_BYTES));
            }
            Ok(BuildState::Failed { message })
        }
    }
}
