//! Triggers: an http trigger exposes its function (a URL in status; an Ingress only
//! without an external URL), a cron trigger is a CronJob whose `suspend` follows
//! `enabled`. Whether the function runs at all is the function controller's call.
//! Event triggers are the dispatcher's (`crate::dispatch`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Api, ResourceExt};

use super::{
    Context, Error, Result, caches, delete_labelled, ensure_finalizer, namespace_of, refusal,
    write_status,
};
use crate::manifests::{self, CronTrigger};
use crate::names::{FINALIZER, owner_selector};
use sless_api::text::first_line;
use sless_core::model::{
    Function, Kind, Phase, Trigger, TriggerStatus, TriggerType, deploy_namespace,
};

/// A trigger waiting for its function looks again this often.
const MISSING_FUNCTION_RETRY: Duration = Duration::from_secs(30);

pub async fn reconcile_trigger(trigger: Arc<Trigger>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = namespace_of(&*trigger)?;
    let api: Api<Trigger> = Api::namespaced(ctx.client.clone(), &namespace);
    let trigger = ensure_finalizer(&api, trigger).await?;
    finalizer(&api, FINALIZER, trigger, |event| async {
        match event {
            Event::Apply(trigger) => apply_trigger(&trigger, &ctx).await,
            Event::Cleanup(trigger) => cleanup_trigger(&trigger, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::FinalizerError(Box::new(e)))
}

async fn remove_children(ctx: &Context, namespace: &str, name: &str) -> Result<()> {
    let deploy_ns = deploy_namespace(namespace);
    let owned = owner_selector(Kind::Trigger, namespace, name);
    delete_labelled(
        &Api::<CronJob>::namespaced(ctx.client.clone(), &deploy_ns),
        &owned,
        None,
    )
    .await?;
    delete_labelled(
        &Api::<Ingress>::namespaced(ctx.client.clone(), &deploy_ns),
        &owned,
        None,
    )
    .await?;
    Ok(())
}

async fn apply_trigger(trigger: &Trigger, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(trigger)?;
    let name = trigger.name_any();
    let spec = &trigger.spec;
    if spec.trigger_type == TriggerType::Event {
        // The dispatcher component consumes its queue and owns its status: a broker
        // outage never reaches the controllers.
        return Ok(Action::await_change());
    }
    let function_name = &spec.function_ref;
    let api: Api<Trigger> = Api::namespaced(ctx.client.clone(), &namespace);
    let current = trigger.status.clone().unwrap_or_default();
    let caches = ctx.caches();
    let function = match &caches {
        Some(caches) => caches::cached(&caches.functions, "function", &namespace, function_name)
            .await?
            .map(|f| (*f).clone()),
        None => {
            let functions: Api<Function> = Api::namespaced(ctx.client.clone(), &namespace);
            functions.get_opt(function_name).await?
        }
    }
    .filter(|f| f.metadata.deletion_timestamp.is_none());
    let children = caches.as_ref().map(|c| &c.trigger_children);

    let Some(function) = function else {
        remove_children(ctx, &namespace, &name).await?;
        let status = TriggerStatus {
            active: false,
            url: None,
            last_schedule_time: current.last_schedule_time.clone(),
            message: Some(format!(
                "function {function_name:?} not found in {namespace}; the trigger waits for it"
            )),
            ..TriggerStatus::default()
        };
        if status != current {
            write_status(ctx, &api, trigger, &status).await?;
        }
        return Ok(Action::requeue(MISSING_FUNCTION_RETRY));
    };

    let phase = function
        .status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or_default();
    let deploy_ns = deploy_namespace(&namespace);
    let mut status = TriggerStatus {
        active: spec.enabled && phase == Phase::Ready,
        url: None,
        last_schedule_time: current.last_schedule_time.clone(),
        message: match phase {
            Phase::Ready => None,
            // A failed build or a failing rollout: its status says which.
            Phase::Failed => Some(format!(
                "function {function_name:?} failed: {}",
                first_line(
                    function
                        .status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .unwrap_or("see its status")
                )
            )),
            Phase::Pending | Phase::Building => Some(format!(
                "function {function_name:?} is {}; the trigger starts when it is Ready",
                phase.as_str()
            )),
        },
        ..TriggerStatus::default()
    };
    match spec.trigger_type {
        TriggerType::Http => {
            status.url = ctx.config.function_url(&namespace, function_name);
            if ctx.config.external_url.is_none() {
                let ingresses: Api<Ingress> = Api::namespaced(ctx.client.clone(), &deploy_ns);
                if spec.enabled {
                    ctx.prepare_deploy_namespace(&namespace, &deploy_ns).await?;
                    let ingress =
                        manifests::http_ingress(&namespace, &name, function_name, &ctx.config);
                    let applied = ctx
                        .apply_unless_current(&ingresses, children.map(|c| &c.ingresses), &ingress)
                        .await;
                    if let Some(refused) = refusal(&applied) {
                        status.active = false;
                        status.message = Some(format!("Kubernetes refused the Ingress: {refused}"));
                    } else {
                        applied?;
                    }
                } else {
                    let owned = owner_selector(Kind::Trigger, &namespace, &name);
                    delete_labelled(&ingresses, &owned, None).await?;
                }
            }
        }
        TriggerType::Cron => {
            ctx.prepare_deploy_namespace(&namespace, &deploy_ns).await?;
            let cron = manifests::cron_job(
                &CronTrigger {
                    namespace: &namespace,
                    trigger: &name,
                    function: function_name,
                    schedule: spec.schedule.as_deref().unwrap_or_default(),
                    enabled: spec.enabled,
                    timeout_sec: function.spec.workload.timeout_sec,
                },
                &ctx.config,
            );
            let cron_jobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), &deploy_ns);
            let applied = ctx
                .apply_unless_current(&cron_jobs, children.map(|c| &c.cron_jobs), &cron)
                .await;
            if let Some(refused) = refusal(&applied) {
                // Said in the status, not retried every few seconds in silence.
                status.active = false;
                status.message = Some(format!("Kubernetes refused the CronJob: {refused}"));
            } else if let Some(time) = applied?
                .status
                .as_ref()
                .and_then(|s| s.last_schedule_time.as_ref())
            {
                status.last_schedule_time = Some(
                    chrono::DateTime::from_timestamp(time.0.as_second(), 0)
                        .unwrap_or_default()
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                );
            }
        }
        // Returned above.
        TriggerType::Event => {}
    }
    if status != current {
        write_status(ctx, &api, trigger, &status).await?;
    }
    Ok(Action::requeue(ctx.config.ready_requeue))
}

async fn cleanup_trigger(trigger: &Trigger, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(trigger)?;
    remove_children(ctx, &namespace, &trigger.name_any()).await?;
    Ok(Action::await_change())
}
