//! Functions and Services: build each upload once, then run the image as a Deployment
//! behind a Service in `sless-fn-<ns>`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, Service as KubeService};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::{DynamicObject, ListParams, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Api, ResourceExt};

use super::build::{BuildState, BuildTarget, build};
use super::{
    Condition, Context, Error, Result, annotate, caches, delete_labelled, ensure_finalizer,
    namespace_of, refusal, write_status, write_status_with,
};
use crate::autoscale::Bounds;
use crate::health::{Health, health};
use crate::manifests::{self, Workload};
use crate::names::{
    FINALIZER, LABEL_FUNCTION, MANAGED_BY, MANAGER, component_labels, owner_selector, selector,
};
use crate::store::api_resource;
use sless_core::model::{
    ANNOTATION_BUILD_JOB, ANNOTATION_BUILT_VERSIONS, ANNOTATION_LAST_BUILT_S3KEY, Function, Kind,
    Phase, Scaling, Service, build_namespace, deploy_namespace, now, workload_image,
};
use sless_core::store::WorkloadResource;
use sless_core::upload::version_of;
use sless_core::workload::{Demand, demand, is_refused_upload, no_code};

pub async fn reconcile_function(function: Arc<Function>, ctx: Arc<Context>) -> Result<Action> {
    reconcile(function, ctx).await
}

pub async fn reconcile_service(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    reconcile(service, ctx).await
}

async fn reconcile<K: WorkloadResource>(object: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = namespace_of(&*object)?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let object = ensure_finalizer(&api, object).await?;
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(object) => apply_workload(&*object, &ctx).await,
            Event::Cleanup(object) => cleanup_workload(&*object, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::FinalizerError(Box::new(e)))
}

/// What the triggers of the workload ask of it; those being deleted no longer count.
async fn demand_on<K: WorkloadResource>(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Demand> {
    let triggers = match K::KIND {
        Kind::Function => ctx.triggers_in(namespace).await?,
        _ => Vec::new(),
    };
    let live = triggers
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .map(|t| (t.metadata.name.as_deref().unwrap_or_default(), &t.spec));
    Ok(demand(K::KIND, name, live))
}

async fn apply_workload<K: WorkloadResource>(object: &K, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(object)?;
    let name = object.name_any();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let spec = K::workload(object.spec());
    let current = object.status().cloned().unwrap_or_default();
    let mut status = current.clone();
    let noun = K::KIND.noun();
    let demand = demand_on::<K>(ctx, &namespace, &name).await?;
    let url = demand
        .has_url
        .then(|| ctx.config.function_url(&namespace, &name))
        .flatten();

    if let Some(first) = name_taken_by_other_kind::<K>(ctx, &namespace, object).await? {
        status.phase = Phase::Failed;
        status.message = Some(first);
        status.url = None;
        if status != current {
            write_status(ctx, &api, object, &status).await?;
        }
        // Looked at again, so it starts once the other one is gone.
        return Ok(Action::requeue(ctx.config.poll_interval));
    }

    let Some(key) = spec.s3_key.as_deref() else {
        status.phase = Phase::Pending;
        // A refused first upload's reason stays until code is stored, as in embedded mode.
        if !current.message.as_deref().is_some_and(is_refused_upload) {
            status.message = Some(no_code(K::KIND, &name));
        }
        status.url = url;
        if status != current {
            write_status(ctx, &api, object, &status).await?;
        }
        return Ok(Action::await_change());
    };

    let deploy_ns = deploy_namespace(&namespace);
    ctx.prepare_deploy_namespace(&namespace, &deploy_ns).await?;
    let image = workload_image(&ctx.config.registry, &namespace, &name, key);
    let annotations = object.annotations();
    let built = annotations
        .get(ANNOTATION_LAST_BUILT_S3KEY)
        .map(String::as_str)
        == Some(key);
    let built_versions = annotations
        .get(ANNOTATION_BUILT_VERSIONS)
        .map(String::as_str)
        .unwrap_or_default();
    let image_built = built_versions
        .split_whitespace()
        .any(|v| v == version_of(key));

    if !built && image_built {
        // A rollback to a kept version: its image is in the registry already.
        tracing::info!(kind = %K::KIND, %namespace, %name, %image, "deploying a built version again");
        mark_built(&api, &name, key, None).await?;
    } else if !built {
        let target = BuildTarget {
            kind: K::KIND,
            namespace: &namespace,
            name: &name,
            s3_key: key,
            image: &image,
            egress: &spec.egress,
        };
        match build(ctx, &target).await? {
            BuildState::Running { job } => {
                status.phase = Phase::Building;
                status.message = Some(format!("building version {} (job {job})", version_of(key)));
                status.url = url;
                if status != current {
                    write_status(ctx, &api, object, &status).await?;
                }
                if annotations.get(ANNOTATION_BUILD_JOB) != Some(&job) {
                    annotate(&api, &name, &[(ANNOTATION_BUILD_JOB, Some(&job))]).await?;
                    let note = format!("building version {} in Job {job}", version_of(key));
                    ctx.event(object, false, "BuildStarted", &note).await;
                }
                return Ok(Action::requeue(ctx.config.poll_interval));
            }
            BuildState::Failed { message } => {
                tracing::info!(kind = %K::KIND, %namespace, %name, "build failed");
                sless_core::metrics::metrics().build(&namespace, &name, false, None);
                ctx.event(object, true, "BuildFailed", &message).await;
                status.phase = Phase::Failed;
                status.message = Some(message);
                status.url = url;
                write_status(ctx, &api, object, &status).await?;
                mark_built(&api, &name, key, None).await?;
                return Ok(Action::await_change());
            }
            BuildState::Succeeded => {
                sless_core::metrics::metrics().build(&namespace, &name, true, None);
                ctx.event(object, false, "BuildSucceeded", &format!("built {image}"))
                    .await;
                status.last_built_at = Some(now());
                status.image_ref = Some(image.clone());
                // Ready only once the Deployment says so (below).
                status.phase = Phase::Building;
                status.message = Some(format!("version {} built; starting it", version_of(key)));
                write_status(ctx, &api, object, &status).await?;
                let versions = with_version(built_versions, version_of(key));
                mark_built(&api, &name, key, Some(&versions)).await?;
            }
        }
    } else if current.phase == Phase::Failed && current.image_ref.as_deref() != Some(&image) {
        // The build of this upload failed: the same upload is never built twice; a new
        // upload changes the key. (Failed with this image is a rollout that failed,
        // looked at again below.)
        return Ok(Action::await_change());
    }

    let bounds = bounds(&demand, spec.scaling(K::KIND));
    let deployment = manifests::deployment(
        &Workload {
            kind: K::KIND,
            namespace: &namespace,
            name: &name,
            spec,
            image: &image,
            bounds,
            restarted_at: status.last_built_at.as_deref(),
        },
        &ctx.config,
    );
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &deploy_ns);
    let services: Api<KubeService> = Api::namespaced(ctx.client.clone(), &deploy_ns);
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &deploy_ns);
    let egress = manifests::egress_policy(
        K::KIND,
        &namespace,
        &name,
        manifests::workload::COMPONENT,
        &spec.egress,
    );
    let caches = ctx.caches();
    let children = caches.as_ref().and_then(|c| c.of(K::KIND));
    let service = manifests::service(K::KIND, &namespace, &name);
    let applied = match ctx
        .apply_unless_current(&policies, children.map(|c| &c.policies), &egress)
        .await
    {
        Ok(_) => match ctx
            .apply_unless_current(&deployments, children.map(|c| &c.deployments), &deployment)
            .await
        {
            Ok(deployed) => ctx
                .apply_unless_current(&services, children.map(|c| &c.services), &service)
                .await
                .map(|_| deployed),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Some(refused) = refusal(&applied) {
        // E.g. a name Kubernetes does not take for a Service.
        status.phase = Phase::Failed;
        status.message = Some(format!("Kubernetes refused the workload: {refused}"));
        write_status(ctx, &api, object, &status).await?;
        return Ok(Action::await_change());
    }
    let deployed = applied?;
    let labels = component_labels(K::KIND, &namespace, &name, manifests::workload::COMPONENT);
    let pods: Vec<Pod> = match children {
        Some(children) => caches::labelled(&children.pods, "pod", &deploy_ns, &labels)
            .await?
            .iter()
            .map(|p| (**p).clone())
            .collect(),
        None => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &deploy_ns);
            pods.list(&ListParams::default().labels(&selector(&labels)))
                .await?
                .items
        }
    };
    let health = match health(&deployed, &pods, &image) {
        // Nothing needs it: the autoscaler scales it to 0, whatever runs now.
        _ if !demand.needed => Health::Available,
        // Ready, no version built since, and the Deployment controller reported on this
        // Deployment (not one re-created): pods starting are the autoscaler's.
        Health::Starting { .. }
            if current.phase == Phase::Ready
                && current.image_ref.as_deref() == Some(&image)
                && deployed.status.is_some() =>
        {
            Health::Available
        }
        health => health,
    };

    status.image_ref = Some(image);
    status.url = url;
    let conditions = health_conditions(&health);
    let (next, reason) = match health {
        Health::Available => {
            status.phase = Phase::Ready;
            let mut notes = Vec::new();
            if !demand.needed {
                notes.push(format!(
                    "{noun} {name:?} has no enabled trigger; it runs 0 instances"
                ));
            }
            let names = manifests::network::unenforceable(&spec.egress);
            if !names.is_empty() {
                notes.push(format!(
                    "egress entries by name cannot be enforced by a NetworkPolicy and are \
                     blocked: {}; list their addresses or CIDRs instead",
                    names.join(", ")
                ));
            }
            status.message = (!notes.is_empty()).then(|| notes.join("; "));
            (ctx.config.ready_requeue, None)
        }
        Health::Starting { message } => {
            status.phase = Phase::Building;
            status.message = Some(format!(
                "version {} is starting: {message}",
                version_of(key)
            ));
            (ctx.config.poll_interval, Some(DEPLOYING.to_string()))
        }
        Health::Unhealthy { reason, message } | Health::Stalled { reason, message } => {
            // Once per reason, not per back-off the kubelet reports.
            let reported = current.phase == Phase::Failed
                && current
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains(&reason));
            if !reported {
                ctx.event(object, true, &reason, &message).await;
            }
            status.phase = Phase::Failed;
            status.message = Some(message);
            (ctx.config.poll_interval, Some(reason))
        }
    };
    if status != current {
        write_status_with(ctx, &api, object, &status, reason.as_deref(), &conditions).await?;
    }
    Ok(Action::requeue(next))
}

/// The replicas the autoscaler may give a workload: none while nothing needs it; at
/// least one while an event or cron trigger calls it, since those calls do not pass
/// through the data plane that counts calls (cron calls its Service directly).
fn bounds(demand: &Demand, scaling: Scaling) -> Bounds {
    if !demand.needed {
        return Bounds {
            min: 0,
            max: 0,
            target: scaling.target_concurrency,
        };
    }
    let min = if demand.dispatched {
        scaling.min_instances.max(1)
    } else {
        scaling.min_instances
    };
    Bounds {
        min,
        max: scaling.max_instances.max(min),
        target: scaling.target_concurrency,
    }
}

/// The reason of `Ready=False` while a built version rolls out.
const DEPLOYING: &str = "Deploying";

/// `ResourcesAvailable` and `ContainerHealthy`, as Knative reports them next to `Ready`.
fn health_conditions(health: &Health) -> Vec<Condition> {
    let (available, healthy) = match health {
        Health::Available => (
            Condition::new("ResourcesAvailable", "True", "Available", ""),
            Condition::new("ContainerHealthy", "True", "Healthy", ""),
        ),
        Health::Starting { message } => (
            Condition::new("ResourcesAvailable", "Unknown", DEPLOYING, message),
            Condition::new("ContainerHealthy", "Unknown", DEPLOYING, ""),
        ),
        Health::Unhealthy { reason, message } => (
            Condition::new("ResourcesAvailable", "False", reason, message),
            Condition::new("ContainerHealthy", "False", reason, message),
        ),
        Health::Stalled { reason, message } => (
            Condition::new("ResourcesAvailable", "False", reason, message),
            Condition::new("ContainerHealthy", "Unknown", reason, ""),
        ),
    };
    vec![available, healthy]
}

/// Functions and Services share names (both become the Deployment and Service of that
/// name): the REST API refuses the second, but `kubectl apply` does not. The older one
/// keeps the name; the message for the newer says why it does not run.
async fn name_taken_by_other_kind<K: WorkloadResource>(
    ctx: &Context,
    namespace: &str,
    object: &K,
) -> Result<Option<String>> {
    let Some(other_kind) = K::KIND.shares_names_with() else {
        return Ok(None);
    };
    let name = object.name_any();
    let other = match ctx.caches() {
        Some(caches) => caches.workload_meta(other_kind, namespace, &name).await?,
        None => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), namespace, &api_resource(other_kind));
            api.get_opt(&name).await?.map(|o| o.metadata)
        }
    };
    let Some(other) = other else {
        return Ok(None);
    };
    let age = |meta: &ObjectMeta| {
        (
            meta.creation_timestamp.as_ref().map(|t| t.0),
            meta.uid.clone(),
        )
    };
    let other_first = other.deletion_timestamp.is_none() && age(&other) < age(object.meta());
    Ok(other_first.then(|| {
        format!(
            "a {} named {name:?} already exists in this namespace; functions and services \
             share names (both are served at /fn/{namespace}/{name}): rename or delete one",
            other_kind.noun()
        )
    }))
}

/// Everything the workload made in the deploy namespace, and a build still running.
async fn cleanup_workload<K: WorkloadResource>(object: &K, ctx: &Context) -> Result<Action> {
    let namespace = namespace_of(object)?;
    let name = object.name_any();
    let deploy_ns = deploy_namespace(&namespace);
    let owned = owner_selector(K::KIND, &namespace, &name);
    let client = &ctx.client;
    delete_labelled(
        &Api::<Deployment>::namespaced(client.clone(), &deploy_ns),
        &owned,
        None,
    )
    .await?;
    delete_labelled(
        &Api::<KubeService>::namespaced(client.clone(), &deploy_ns),
        &owned,
        None,
    )
    .await?;
    for policy_ns in [deploy_ns.clone(), build_namespace(&namespace)] {
        let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &policy_ns);
        delete_labelled(&policies, &owned, None).await?;
    }
    delete_labelled(
        &Api::<Job>::namespaced(client.clone(), &build_namespace(&namespace)),
        &owned,
        None,
    )
    .await?;
    if K::KIND == Kind::Function {
        // The function's triggers stay (and report it missing); what calls it goes.
        let callers = format!("{MANAGED_BY}={MANAGER},{LABEL_FUNCTION}={name}");
        delete_labelled(
            &Api::<CronJob>::namespaced(client.clone(), &deploy_ns),
            &callers,
            None,
        )
        .await?;
        delete_labelled(
            &Api::<Ingress>::namespaced(client.clone(), &deploy_ns),
            &callers,
            None,
        )
        .await?;
    }
    tracing::info!(kind = %K::KIND, %namespace, %name, "cleaned up");
    Ok(Action::await_change())
}

/// Records that `key` was built (or failed to), so it is not built again, and forgets the
/// build Job; with `built_versions`, the versions whose image is built. Written after the
/// status: if it is lost, the next pass reads the same finished Job again instead of
/// building twice.
async fn mark_built<K: WorkloadResource>(
    api: &Api<K>,
    name: &str,
    key: &str,
    built_versions: Option<&str>,
) -> Result<()> {
    let mut annotations = vec![
        (ANNOTATION_LAST_BUILT_S3KEY, Some(key)),
        (ANNOTATION_BUILD_JOB, None),
    ];
    if let Some(versions) = built_versions {
        annotations.push((ANNOTATION_BUILT_VERSIONS, Some(versions)));
    }
    annotate(api, name, &annotations).await
}

/// The most versions [`ANNOTATION_BUILT_VERSIONS`] lists: `--keep-versions` at its
/// largest, so every kept version's image is known.
const MAX_BUILT_VERSIONS: usize = 1000;

/// `built` with `version` added last, the oldest dropped past [`MAX_BUILT_VERSIONS`].
fn with_version(built: &str, version: &str) -> String {
    let mut versions: Vec<&str> = built.split_whitespace().filter(|v| *v != version).collect();
    versions.push(version);
    let skip = versions.len().saturating_sub(MAX_BUILT_VERSIONS);
    versions[skip..].join(" ")
}
