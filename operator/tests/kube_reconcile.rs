//! Reconcile flows against an in-memory Kubernetes API: the reconcilers are called as
//! the Controller would call them, and the test plays the cluster's other parts
//! (the Job controller marking Jobs done, kubectl deleting objects).

mod kube_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service as KubeService};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};
use kube_common::*;
use operator::autoscale::{ANNOTATION_SCALING, Bounds};
use operator::controller::{reconcile_function, reconcile_job, reconcile_trigger};
use operator::names::{FINALIZER, build_job_name};
use operator::{Context, KubeStore};
use serde_json::{Value, json};
use sless_core::model::{
    ANNOTATION_BUILD_JOB, ANNOTATION_LAST_BUILT_S3KEY, Function, FunctionJob, FunctionJobSpec,
    FunctionSpec, JobPhase, Phase, Runtime, Trigger, TriggerSpec, TriggerType, WorkloadSpec,
    workload_image,
};
use sless_core::store::{Store, StoreExt, modify, modify_status};

const NS: &str = "sless-cdd874dfa31ba6ca";
const DEPLOY_NS: &str = "sless-fn-sless-cdd874dfa31ba6ca";
const BUILD_NS: &str = "sless-build-sless-cdd874dfa31ba6ca";
const KEY: &str = "contexts/sless-cdd874dfa31ba6ca/hello/20250101120000.tar.gz";

struct Cluster {
    client: kube::Client,
    store: Arc<dyn Store>,
    ctx: Arc<Context>,
    logs: Arc<FakeLogs>,
}

async fn cluster() -> Cluster {
    cluster_with(config()).await
}

async fn cluster_with(config: operator::KubeConfig) -> Cluster {
    cluster_on(fake_client().await, config)
}

fn cluster_on(client: kube::Client, config: operator::KubeConfig) -> Cluster {
    let logs = Arc::new(FakeLogs::default());
    Cluster {
        store: Arc::new(KubeStore::new(client.clone())),
        ctx: context(client.clone(), config, logs.clone()),
        client,
        logs,
    }
}

fn function_spec(key: Option<&str>) -> FunctionSpec {
    FunctionSpec {
        workload: WorkloadSpec {
            runtime: Runtime::Python311,
            entrypoint: "handler.handle".into(),
            memory_mb: 256,
            cpu_millis: 1000,
            disk_mb: 512,
            timeout_sec: 30,
            env: BTreeMap::from([("GREETING".to_string(), "hi".to_string())]),
            s3_key: key.map(String::from),
            replicas: None,
            min_instances: None,
            max_instances: None,
            target_concurrency: None,
            egress: Default::default(),
        },
    }
}

fn trigger_spec(trigger_type: TriggerType, enabled: bool) -> TriggerSpec {
    TriggerSpec {
        trigger_type,
        function_ref: "hello".into(),
        schedule: (trigger_type == TriggerType::Cron).then(|| "*/5 * * * *".to_string()),
        queue: None,
        enabled,
        concurrency: None,
        max_retries: None,
    }
}

impl Cluster {
    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn function(&self) -> Function {
        self.api::<Function>(NS).get("hello").await.unwrap()
    }

    async fn reconcile_function(&self) -> kube::runtime::controller::Action {
        let function = Arc::new(self.function().await);
        reconcile_function(function, self.ctx.clone())
            .await
            .unwrap()
    }

    async fn reconcile_trigger(&self, name: &str) {
        let trigger = Arc::new(self.api::<Trigger>(NS).get(name).await.unwrap());
        reconcile_trigger(trigger, self.ctx.clone()).await.unwrap();
    }

    async fn reconcile_job(&self, name: &str) {
        let job = Arc::new(self.api::<FunctionJob>(NS).get(name).await.unwrap());
        reconcile_job(job, self.ctx.clone()).await.unwrap();
    }

    /// What the Job controller does when a Job's pod ends.
    async fn finish_job(&self, name: &str, succeeded: bool) {
        let condition = if succeeded {
            json!({"type": "Complete", "status": "True"})
        } else {
            json!({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                   "message": "Job has reached the specified backoff limit"})
        };
        let status = if succeeded {
            json!({"status": {"succeeded": 1, "conditions": [condition]}})
        } else {
            json!({"status": {"failed": 3, "conditions": [condition]}})
        };
        let namespace = if self
            .api::<Job>(BUILD_NS)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
        {
            BUILD_NS
        } else {
            DEPLOY_NS
        };
        self.api::<Job>(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    }

    async fn deployment(&self) -> Option<Deployment> {
        self.api::<Deployment>(DEPLOY_NS)
            .get_opt("hello")
            .await
            .unwrap()
    }

    /// What the Deployment controller reports once every wanted replica is available.
    async fn roll_out(&self) {
        let deployment = self.deployment().await.unwrap();
        // The API server's default; the autoscaler sets replicas, not the reconcile.
        let replicas = deployment.spec.unwrap().replicas.unwrap_or(1);
        // kube-fake-client counts every apply as a new generation, even one that
        // changes nothing (an API server does not): the reconcile's next apply makes it
        // this one.
        let generation = deployment.metadata.generation.unwrap_or(0) + 1;
        let status = json!({"status": {
            "observedGeneration": generation, "replicas": replicas,
            "updatedReplicas": replicas, "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [{"type": "Available", "status": "True",
                            "reason": "MinimumReplicasAvailable"}],
        }});
        self.api::<Deployment>(DEPLOY_NS)
            .patch_status("hello", &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    }

    /// A pod of the Deployment whose container the kubelet reports waiting for `reason`.
    async fn waiting_pod(&self, reason: &str, last_exit: &str) {
        let template = self.deployment().await.unwrap().spec.unwrap().template;
        let image = template.spec.as_ref().unwrap().containers[0].image.clone();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "hello-7d9f-x2", "namespace": DEPLOY_NS,
                         "labels": template.metadata.unwrap().labels},
            "spec": template.spec,
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "function", "image": image, "imageID": "", "ready": false,
                "restartCount": 5,
                "state": {"waiting": {"reason": reason, "message": "back-off 2m40s"}},
                "lastState": {"terminated": {"reason": last_exit, "exitCode": 1}},
            }]},
        }))
        .unwrap();
        self.api::<Pod>(DEPLOY_NS)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    /// The replicas the autoscaler may give the Deployment.
    async fn bounds(&self) -> Bounds {
        let deployment = self.deployment().await.unwrap();
        Bounds::parse(&deployment.annotations()[ANNOTATION_SCALING]).unwrap()
    }

    async fn names<K>(&self) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.names_in::<K>(DEPLOY_NS).await
    }

    /// The build Jobs, in the namespace builds run in.
    async fn builds(&self) -> Vec<String> {
        self.names_in::<Job>(BUILD_NS).await
    }

    async fn names_in<K>(&self, namespace: &str) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let mut names: Vec<String> = self
            .api::<K>(namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o.name_any())
            .collect();
        names.sort();
        names
    }

    /// A Ready function with an image, as a finished build leaves it.
    async fn ready_function(&self) {
        self.store
            .create_typed::<Function>(NS, "hello", &function_spec(Some(KEY)))
            .await
            .unwrap();
        self.reconcile_function().await;
        self.finish_job(&build_job_name("hello", KEY), true).await;
        self.reconcile_function().await;
        assert_eq!(self.function().await.status.unwrap().phase, Phase::Ready);
    }
}

/// The object as the watcher delivers it after `kubectl delete`: marked, not gone,
/// until the finalizer is removed.
fn marked_for_deletion<K: kube::Resource + Clone>(object: &K) -> Arc<K> {
    let mut marked = object.clone();
    marked.meta_mut().deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    Arc::new(marked)
}

#[tokio::test]
async fn function_build_deploy_restore_and_cleanup() {
    let c = cluster().await;
    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(None))
        .await
        .unwrap();

    // No code yet: Pending, and the finalizer guards the children to come.
    c.reconcile_function().await;
    let function = c.function().await;
    assert!(function.finalizers().contains(&FINALIZER.to_string()));
    assert_eq!(function.status.as_ref().unwrap().phase, Phase::Pending);
    assert!(c.builds().await.is_empty());

    // The upload sets s3Key: a build Job appears in the deploy namespace.
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(KEY.into());
    })
    .await
    .unwrap();
    let action = c.reconcile_function().await;
    let build = build_job_name("hello", KEY);
    assert_eq!(c.builds().await, std::slice::from_ref(&build));
    let deploy_ns = Api::<Namespace>::all(c.client.clone())
        .get_opt(DEPLOY_NS)
        .await
        .unwrap();
    assert!(deploy_ns.is_some(), "the deploy namespace is created");
    let function = c.function().await;
    let status = function.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Building);
    assert_eq!(function.annotations()[ANNOTATION_BUILD_JOB], build);
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(c.ctx.config.poll_interval)
    );
    let job = c.api::<Job>(BUILD_NS).get(&build).await.unwrap();
    let init = &job
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .init_containers
        .unwrap()[0];
    let url = init.env.as_ref().unwrap()[0].value.clone().unwrap();
    assert!(
        url.starts_with(&format!("https://s3.test/sless/{KEY}")),
        "{url}"
    );

    // Still running: nothing new.
    c.reconcile_function().await;
    assert_eq!(c.builds().await, std::slice::from_ref(&build));
    assert!(c.deployment().await.is_none());

    // The build succeeds: Ready, a Deployment rolled at lastBuiltAt, and a Service.
    c.finish_job(&build, true).await;
    c.reconcile_function().await;
    let function = c.function().await;
    let status = function.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
    let image = workload_image(REGISTRY, NS, "hello", KEY);
    assert_eq!(status.image_ref.as_deref(), Some(image.as_str()));
    assert_eq!(function.annotations()[ANNOTATION_LAST_BUILT_S3KEY], KEY);
    assert!(!function.annotations().contains_key(ANNOTATION_BUILD_JOB));
    let built_at = status.last_built_at.clone().expect("lastBuiltAt");
    let deployment = c.deployment().await.expect("deployment");
    let template = deployment.spec.as_ref().unwrap().template.clone();
    assert_eq!(
        template.metadata.unwrap().annotations.unwrap()["kubectl.kubernetes.io/restartedAt"],
        built_at
    );
    assert_eq!(
        template.spec.unwrap().containers[0].image.as_deref(),
        Some(image.as_str())
    );
    // No trigger needs it yet.
    assert_eq!(c.bounds().await.max, 0);
    assert_eq!(c.names::<KubeService>().await, ["hello"]);

    // An enabled trigger brings it up, with the URL in status.
    c.store
        .create_typed::<Trigger>(NS, "web", &trigger_spec(TriggerType::Http, true))
        .await
        .unwrap();
    c.reconcile_function().await;
    // Reached through /fn only: down to zero when idle.
    assert_eq!((c.bounds().await.min, c.bounds().await.max), (0, 4));
    let status = c.function().await.status.unwrap();
    assert_eq!(
        status.url.as_deref(),
        Some("https://fn.example.com/fn/sless-cdd874dfa31ba6ca/hello")
    );
    // Not Ready until the Deployment says its replica is available.
    assert_eq!(status.phase, Phase::Building, "{status:?}");
    assert!(
        status.message.as_deref().unwrap().contains("is starting"),
        "{status:?}"
    );
    c.roll_out().await;
    let action = c.reconcile_function().await;
    assert_eq!(c.function().await.status.unwrap().phase, Phase::Ready);
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(c.ctx.config.ready_requeue)
    );

    // The same upload is never built twice.
    c.reconcile_function().await;
    assert_eq!(c.builds().await, std::slice::from_ref(&build));

    // A Deployment deleted by hand comes back at the next reconcile (a Ready object
    // is requeued every few minutes).
    c.api::<Deployment>(DEPLOY_NS)
        .delete("hello", &DeleteParams::default())
        .await
        .unwrap();
    assert!(c.deployment().await.is_none());
    let action = c.reconcile_function().await;
    assert!(c.deployment().await.is_some());
    // The new Deployment has no available pod yet: looked at again soon.
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(c.ctx.config.poll_interval)
    );
    assert_eq!(c.function().await.status.unwrap().phase, Phase::Building);

    // Deleting the Function: the finalizer removes every child, the build Job too.
    let function = c.function().await;
    reconcile_function(marked_for_deletion(&function), c.ctx.clone())
        .await
        .unwrap();
    assert!(c.deployment().await.is_none());
    assert!(c.names::<KubeService>().await.is_empty());
    assert!(c.builds().await.is_empty());
    assert!(
        !c.function()
            .await
            .finalizers()
            .contains(&FINALIZER.to_string())
    );
}

#[tokio::test]
async fn a_failed_build_is_failed_with_the_reason_and_not_retried() {
    let c = cluster().await;
    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(Some(KEY)))
        .await
        .unwrap();
    c.reconcile_function().await;
    let build = build_job_name("hello", KEY);
    c.logs.set(
        BUILD_NS,
        &build,
        "build",
        "#5 [2/3] RUN pip install --no-cache-dir -r requirements.txt\n\
         ERROR: No matching distribution found for nosuchpackage==9.9\n",
    );
    c.finish_job(&build, false).await;
    c.reconcile_function().await;
    let function = c.function().await;
    let status = function.status.unwrap();
    assert_eq!(status.phase, Phase::Failed);
    let message = status.message.unwrap();
    assert!(message.contains("BackoffLimitExceeded"), "{message}");
    assert!(
        message.contains("No matching distribution found"),
        "{message}"
    );
    assert_eq!(
        function.metadata.annotations.unwrap()[ANNOTATION_LAST_BUILT_S3KEY],
        KEY
    );

    // The failed Job is kept for its log; no second build, no Deployment.
    c.api::<Job>(BUILD_NS)
        .delete(&build, &DeleteParams::background())
        .await
        .unwrap();
    c.reconcile_function().await;
    assert!(c.builds().await.is_empty());
    assert!(c.deployment().await.is_none());
    assert_eq!(c.function().await.status.unwrap().phase, Phase::Failed);

    // A new upload builds again.
    let next = "contexts/sless-cdd874dfa31ba6ca/hello/20250101130000.tar.gz";
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(next.into());
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    assert_eq!(c.builds().await, [build_job_name("hello", next)]);
    assert_eq!(c.function().await.status.unwrap().phase, Phase::Building);
}

#[tokio::test]
async fn a_new_upload_replaces_a_running_build() {
    let c = cluster().await;
    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(Some(KEY)))
        .await
        .unwrap();
    c.reconcile_function().await;
    let next = "contexts/sless-cdd874dfa31ba6ca/hello/20250101130000.tar.gz";
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(next.into());
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    assert_eq!(c.builds().await, [build_job_name("hello", next)]);
}

#[tokio::test]
async fn a_rollback_to_a_built_version_deploys_its_image_without_a_build() {
    let c = cluster().await;
    c.ready_function().await;
    let next = "contexts/sless-cdd874dfa31ba6ca/hello/20250101130000.tar.gz";
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(next.into());
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    c.finish_job(&build_job_name("hello", next), true).await;
    c.reconcile_function().await;
    let image_of = |key| workload_image(REGISTRY, NS, "hello", key);
    let deployed = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
    };
    assert_eq!(
        deployed(c.deployment().await.unwrap()),
        Some(image_of(next))
    );

    // The API's rollback: the old key again, phase Building until it serves.
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(KEY.into());
    })
    .await
    .unwrap();
    modify_status::<Function, _>(&*c.store, NS, "hello", |f| {
        f.status.phase = Phase::Building;
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    assert_eq!(
        c.builds().await,
        [build_job_name("hello", next)],
        "no build Job for the old version"
    );
    assert_eq!(deployed(c.deployment().await.unwrap()), Some(image_of(KEY)));
    let function = c.function().await;
    let status = function.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
    assert_eq!(status.image_ref, Some(image_of(KEY)));
    assert_eq!(function.annotations()[ANNOTATION_LAST_BUILT_S3KEY], KEY);

    // A version never built is built, as any upload.
    let unbuilt = "contexts/sless-cdd874dfa31ba6ca/hello/20250101140000.tar.gz";
    modify::<Function, _>(&*c.store, NS, "hello", |f| {
        f.spec.workload.s3_key = Some(unbuilt.into());
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    assert_eq!(c.builds().await, [build_job_name("hello", unbuilt)]);
}

#[tokio::test]
async fn trigger_enabled_drives_replicas_and_cron_suspend() {
    let c = cluster().await;
    c.ready_function().await;
    c.store
        .create_typed::<Trigger>(NS, "tick", &trigger_spec(TriggerType::Cron, true))
        .await
        .unwrap();
    c.reconcile_trigger("tick").await;
    c.reconcile_function().await;
    let cron = c.api::<CronJob>(DEPLOY_NS).get("tick").await.unwrap();
    assert_eq!(cron.spec.as_ref().unwrap().suspend, Some(false));
    assert_eq!(cron.spec.as_ref().unwrap().schedule, "*/5 * * * *");
    // Cron calls the Service directly: one instance is kept.
    assert_eq!(c.bounds().await.min, 1);
    let status = c
        .api::<Trigger>(NS)
        .get("tick")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(status.active, "{status:?}");

    // Stopped in place: the CronJob is suspended, the function scales to 0.
    modify::<Trigger, _>(&*c.store, NS, "tick", |t| t.spec.enabled = false)
        .await
        .unwrap();
    c.reconcile_trigger("tick").await;
    c.reconcile_function().await;
    let cron = c.api::<CronJob>(DEPLOY_NS).get("tick").await.unwrap();
    assert_eq!(cron.spec.unwrap().suspend, Some(true));
    assert_eq!(c.bounds().await.max, 0);
    let trigger = c.api::<Trigger>(NS).get("tick").await.unwrap();
    assert!(!trigger.status.unwrap().active);

    // And back.
    modify::<Trigger, _>(&*c.store, NS, "tick", |t| t.spec.enabled = true)
        .await
        .unwrap();
    c.reconcile_trigger("tick").await;
    c.reconcile_function().await;
    let cron = c.api::<CronJob>(DEPLOY_NS).get("tick").await.unwrap();
    assert_eq!(cron.spec.unwrap().suspend, Some(false));
    assert_eq!(c.bounds().await.min, 1);

    // Deleting the trigger removes its CronJob.
    let trigger = c.api::<Trigger>(NS).get("tick").await.unwrap();
    reconcile_trigger(marked_for_deletion(&trigger), c.ctx.clone())
        .await
        .unwrap();
    assert!(c.names::<CronJob>().await.is_empty());
}

#[tokio::test]
async fn an_event_trigger_runs_its_function_and_its_status_is_the_dispatchers() {
    let c = cluster().await;
    c.ready_function().await;
    let mut spec = trigger_spec(TriggerType::Event, true);
    spec.queue = Some("orders".into());
    c.store
        .create_typed::<Trigger>(NS, "orders", &spec)
        .await
        .unwrap();
    // What the dispatcher wrote stays: the controller never touches it.
    let written = modify_status::<Trigger, _>(&*c.store, NS, "orders", |t| {
        t.status.active = true;
        t.status.delivered = 7;
    })
    .await
    .unwrap();
    c.reconcile_trigger("orders").await;
    c.reconcile_function().await;
    assert_eq!(
        c.bounds().await.min,
        1,
        "an enabled event trigger needs the function"
    );
    let trigger = c.api::<Trigger>(NS).get("orders").await.unwrap();
    assert_eq!(trigger.status.unwrap(), written.status);
    assert!(
        c.api::<CronJob>(DEPLOY_NS)
            .get_opt("orders")
            .await
            .unwrap()
            .is_none(),
        "no child of its own"
    );
}

#[tokio::test]
async fn http_trigger_writes_the_url_and_deleting_the_function_removes_its_cron_jobs() {
    let c = cluster().await;
    c.ready_function().await;
    for (name, kind) in [("web", TriggerType::Http), ("tick", TriggerType::Cron)] {
        c.store
            .create_typed::<Trigger>(NS, name, &trigger_spec(kind, true))
            .await
            .unwrap();
        c.reconcile_trigger(name).await;
    }
    let web = c
        .api::<Trigger>(NS)
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        web.url.as_deref(),
        Some("https://fn.example.com/fn/sless-cdd874dfa31ba6ca/hello")
    );
    assert!(web.active);
    // An external URL is configured: no Ingress.
    assert!(
        c.names::<k8s_openapi::api::networking::v1::Ingress>()
            .await
            .is_empty()
    );
    assert_eq!(c.names::<CronJob>().await, ["tick"]);

    let function = c.function().await;
    reconcile_function(marked_for_deletion(&function), c.ctx.clone())
        .await
        .unwrap();
    assert!(c.names::<CronJob>().await.is_empty());
    c.api::<Function>(NS)
        .delete("hello", &DeleteParams::default())
        .await
        .unwrap();
    c.reconcile_trigger("tick").await;
    let tick = c
        .api::<Trigger>(NS)
        .get("tick")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!tick.active);
    assert!(tick.message.unwrap().contains("not found"));
    assert!(
        c.names::<CronJob>().await.is_empty(),
        "not recreated for a missing function"
    );
}

#[tokio::test]
async fn a_trigger_of_a_missing_function_says_so_and_retries() {
    let c = cluster().await;
    c.store
        .create_typed::<Trigger>(NS, "web", &trigger_spec(TriggerType::Http, true))
        .await
        .unwrap();
    let trigger = Arc::new(c.api::<Trigger>(NS).get("web").await.unwrap());
    let action = reconcile_trigger(trigger, c.ctx.clone()).await.unwrap();
    assert_ne!(action, kube::runtime::controller::Action::await_change());
    let status = c
        .api::<Trigger>(NS)
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!status.active);
    assert_eq!(
        status.message.as_deref(),
        Some("function \"hello\" not found in sless-cdd874dfa31ba6ca; the trigger waits for it")
    );
}

#[tokio::test]
async fn an_http_trigger_without_external_url_gets_an_ingress() {
    let mut config = config();
    config.external_url = None;
    config.ingress.host = Some("fn.example.com".into());
    let c = cluster_with(config).await;
    c.ready_function().await;
    c.store
        .create_typed::<Trigger>(NS, "web", &trigger_spec(TriggerType::Http, true))
        .await
        .unwrap();
    c.reconcile_trigger("web").await;
    assert_eq!(
        c.names::<k8s_openapi::api::networking::v1::Ingress>().await,
        ["web-http"]
    );
    let status = c
        .api::<Trigger>(NS)
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        status.url.as_deref(),
        Some("http://fn.example.com/fn/sless-cdd874dfa31ba6ca/hello")
    );
    modify::<Trigger, _>(&*c.store, NS, "web", |t| t.spec.enabled = false)
        .await
        .unwrap();
    c.reconcile_trigger("web").await;
    assert!(
        c.names::<k8s_openapi::api::networking::v1::Ingress>()
            .await
            .is_empty()
    );
}

fn job_spec(run_id: i64) -> FunctionJobSpec {
    FunctionJobSpec {
        function_ref: Some("hello".into()),
        runtime: None,
        entrypoint: None,
        env: BTreeMap::from([("EXTRA".to_string(), "1".to_string())]),
        s3_key: None,
        event_json: "{\"day\": 1}".into(),
        run_id,
        timeout_sec: 10,
        cpu_millis: None,
        disk_mb: None,
        egress: None,
    }
}

#[tokio::test]
async fn function_job_run_id_semantics() {
    let c = cluster().await;
    c.ready_function().await;
    c.store
        .create_typed::<FunctionJob>(NS, "nightly", &job_spec(0))
        .await
        .unwrap();
    c.reconcile_job("nightly").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Skipped);
    assert!(
        c.names::<Job>()
            .await
            .iter()
            .all(|j| !j.starts_with("nightly"))
    );

    // run 1: a Job with the function's image and the event.
    modify::<FunctionJob, _>(&*c.store, NS, "nightly", |j| j.spec.run_id = 1)
        .await
        .unwrap();
    c.reconcile_job("nightly").await;
    let job = c.api::<Job>(DEPLOY_NS).get("nightly-run-1").await.unwrap();
    // The run's pods get the function's egress (the default, the internet) under the
    // deploy namespace's default deny.
    let policy = c
        .api::<NetworkPolicy>(DEPLOY_NS)
        .get("nightly-run-egress")
        .await
        .unwrap()
        .spec
        .unwrap();
    let pods = policy.pod_selector.unwrap().match_labels.unwrap();
    assert_eq!(
        (
            pods["sless.kube5s.ru/kind"].as_str(),
            pods["sless.kube5s.ru/component"].as_str()
        ),
        ("job", "run")
    );
    let egress = policy.egress.unwrap();
    let cidr = egress[1].to.as_ref().unwrap()[0].ip_block.as_ref().unwrap();
    assert_eq!(cidr.cidr, "0.0.0.0/0");
    assert!(
        c.api::<NetworkPolicy>(DEPLOY_NS)
            .get("sless-default-deny")
            .await
            .is_ok()
    );
    let container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    assert_eq!(
        container.image,
        Some(workload_image(REGISTRY, NS, "hello", KEY))
    );
    let env: BTreeMap<String, String> = container
        .env
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    assert_eq!(env["GREETING"], "hi");
    assert_eq!(env["EXTRA"], "1");
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Running);
    assert_eq!(status.job_name.as_deref(), Some("nightly-run-1"));
    assert!(status.start_time.is_some());
    // The event carries the run's request id, as a call through /fn does.
    let event: Value = serde_json::from_str(&env["SLESS_EVENT_JSON"]).unwrap();
    let request_id = status.request_id.clone().unwrap();
    assert_eq!(event, json!({"day": 1, "_request_id": request_id}));

    // Still running.
    c.reconcile_job("nightly").await;
    assert_eq!(
        c.api::<FunctionJob>(NS)
            .get("nightly")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase,
        JobPhase::Running
    );

    // It succeeds; the result is the log's last line.
    c.logs.set(
        DEPLOY_NS,
        "nightly-run-1",
        "run",
        "processing day 1\n{\"processed\": 42}\n",
    );
    c.finish_job("nightly-run-1", true).await;
    c.reconcile_job("nightly").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Succeeded, "{status:?}");
    assert_eq!(status.message.as_deref(), Some("{\"processed\": 42}"));
    assert!(status.log_tail.unwrap().contains("processing day 1"));
    assert!(status.completion_time.is_some());
    assert_eq!(status.observed_run_id, Some(1));

    // run 2 replaces run 1: a new Job, the old one goes.
    modify::<FunctionJob, _>(&*c.store, NS, "nightly", |j| j.spec.run_id = 2)
        .await
        .unwrap();
    c.reconcile_job("nightly").await;
    let jobs: Vec<String> = c
        .names::<Job>()
        .await
        .into_iter()
        .filter(|j| j.starts_with("nightly"))
        .collect();
    assert_eq!(jobs, ["nightly-run-2"]);
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Running);
    assert_eq!(status.message, None, "the status describes the new run");
    assert_eq!(
        status.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(),
        [2, 1],
        "run 1 stays in the history"
    );
    assert_eq!(
        status.runs[1].message.as_deref(),
        Some("{\"processed\": 42}")
    );
    assert_ne!(status.request_id.as_deref(), Some(request_id.as_str()));

    // A failed run reports the handler's error.
    c.logs.set(
        DEPLOY_NS,
        "nightly-run-2",
        "run",
        "Traceback ...\n{\"error\": \"ValueError: bad day\"}\n",
    );
    c.finish_job("nightly-run-2", false).await;
    c.reconcile_job("nightly").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Failed);
    assert_eq!(status.message.as_deref(), Some("ValueError: bad day"));

    // Deleting the FunctionJob removes its Jobs.
    let job = c.api::<FunctionJob>(NS).get("nightly").await.unwrap();
    reconcile_job(marked_for_deletion(&job), c.ctx.clone())
        .await
        .unwrap();
    assert!(
        c.names::<Job>()
            .await
            .iter()
            .all(|j| !j.starts_with("nightly"))
    );
}

/// The status keeps the last `job_runs_kept` runs, each with its own result and log.
#[tokio::test]
async fn function_job_status_keeps_a_bounded_run_history() {
    let mut config = config();
    config.job_runs_kept = 2;
    let c = cluster_with(config).await;
    c.ready_function().await;
    c.store
        .create_typed::<FunctionJob>(NS, "daily", &job_spec(0))
        .await
        .unwrap();
    for run_id in 1..=3 {
        modify::<FunctionJob, _>(&*c.store, NS, "daily", |j| {
            j.spec.run_id = run_id;
            j.spec.event_json = format!("{{\"day\": {run_id}}}");
        })
        .await
        .unwrap();
        c.reconcile_job("daily").await;
        let job_name = format!("daily-run-{run_id}");
        c.logs.set(
            DEPLOY_NS,
            &job_name,
            "run",
            &format!("day {run_id}\n{{\"day\": {run_id}}}\n"),
        );
        c.finish_job(&job_name, true).await;
        c.reconcile_job("daily").await;
    }
    let job = c.api::<FunctionJob>(NS).get("daily").await.unwrap();
    let status = job.status.unwrap();
    let runs: Vec<(i64, String, String)> = status
        .runs
        .iter()
        .map(|r| {
            (
                r.run_id,
                r.message.clone().unwrap_or_default(),
                r.log_tail.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            (3, "{\"day\": 3}".into(), "day 3\n{\"day\": 3}".into()),
            (2, "{\"day\": 2}".into(), "day 2\n{\"day\": 2}".into()),
        ]
    );
    assert_eq!(status.runs[0].event_json, "{\"day\": 3}");
    assert!(status.runs.iter().all(|r| r.phase == JobPhase::Succeeded));
    // What the API server stores stays small.
    let bytes = serde_json::to_vec(&c.api::<FunctionJob>(NS).get("daily").await.unwrap())
        .unwrap()
        .len();
    assert!(bytes < 8 * 1024, "{bytes} bytes");
}

#[tokio::test]
async fn function_job_of_a_missing_or_unbuilt_function() {
    let c = cluster().await;
    c.store
        .create_typed::<FunctionJob>(NS, "orphan", &job_spec(1))
        .await
        .unwrap();
    c.reconcile_job("orphan").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("orphan")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Failed);
    assert!(status.message.unwrap().contains("not found"));

    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(None))
        .await
        .unwrap();
    c.store
        .create_typed::<FunctionJob>(NS, "waiting", &job_spec(1))
        .await
        .unwrap();
    c.reconcile_job("waiting").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("waiting")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Pending);
    assert!(status.message.unwrap().contains("waiting for function"));
}

#[tokio::test]
async fn self_contained_job_builds_first() {
    let c = cluster().await;
    let key = "contexts/sless-cdd874dfa31ba6ca/_jobs/adhoc/20250101120000.tar.gz";
    let spec = FunctionJobSpec {
        function_ref: None,
        runtime: Some(Runtime::Nodejs20),
        entrypoint: Some("handler.handle".into()),
        s3_key: Some(key.into()),
        ..job_spec(1)
    };
    c.store
        .create_typed::<FunctionJob>(NS, "adhoc", &spec)
        .await
        .unwrap();
    c.reconcile_job("adhoc").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("adhoc")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Building);
    let build = build_job_name("adhoc", key);
    assert_eq!(c.builds().await, std::slice::from_ref(&build));
    c.finish_job(&build, true).await;
    c.reconcile_job("adhoc").await;
    let run = c.api::<Job>(DEPLOY_NS).get("adhoc-run-1").await.unwrap();
    assert_eq!(
        run.spec.unwrap().template.spec.unwrap().containers[0].image,
        Some(workload_image(REGISTRY, NS, "adhoc", key))
    );
}

#[tokio::test]
async fn the_registry_secret_is_copied_and_kept_in_sync() {
    let mut config = config();
    config.registry_secret = Some("regcred".into());
    let c = cluster_with(config).await;
    let secret = |auth: &str| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("regcred".into()),
            namespace: Some("sless-system".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            k8s_openapi::ByteString(auth.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    let sources = c.api::<Secret>("sless-system");
    sources
        .create(&PostParams::default(), &secret("{\"auths\":{\"a\":{}}}"))
        .await
        .unwrap();
    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(Some(KEY)))
        .await
        .unwrap();
    c.reconcile_function().await;
    let copy = c.api::<Secret>(DEPLOY_NS).get("regcred").await.unwrap();
    assert_eq!(copy.data, secret("{\"auths\":{\"a\":{}}}").data);
    assert_eq!(
        copy.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );

    // The source changes: the next reconcile updates the copy.
    sources
        .patch(
            "regcred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {".dockerconfigjson": "eyJhdXRocyI6e319"}})),
        )
        .await
        .unwrap();
    c.reconcile_function().await;
    let copy = c.api::<Secret>(DEPLOY_NS).get("regcred").await.unwrap();
    assert_eq!(
        copy.data.unwrap()[".dockerconfigjson"].0,
        b"{\"auths\":{}}".to_vec()
    );
}

#[tokio::test]
async fn a_service_is_always_on() {
    let c = cluster().await;
    let spec = sless_core::model::ServiceSpec {
        workload: function_spec(Some(KEY)).workload,
    };
    c.store
        .create_typed::<sless_core::model::Service>(NS, "hello", &spec)
        .await
        .unwrap();
    let reconcile = || async {
        let svc = c
            .api::<sless_core::model::Service>(NS)
            .get("hello")
            .await
            .unwrap();
        operator::controller::reconcile_service(Arc::new(svc), c.ctx.clone())
            .await
            .unwrap();
    };
    reconcile().await;
    c.finish_job(&build_job_name("hello", KEY), true).await;
    reconcile().await;
    let svc = c
        .api::<sless_core::model::Service>(NS)
        .get("hello")
        .await
        .unwrap();
    let status = svc.status.unwrap();
    assert_eq!(status.phase, Phase::Building, "{status:?}");
    c.roll_out().await;
    reconcile().await;
    let svc = c
        .api::<sless_core::model::Service>(NS)
        .get("hello")
        .await
        .unwrap();
    let status = svc.status.unwrap();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
    assert_eq!(
        status.url.as_deref(),
        Some("https://fn.example.com/fn/sless-cdd874dfa31ba6ca/hello")
    );
    assert_eq!(c.bounds().await.min, 1, "a service keeps one instance");
    assert_eq!(c.names::<KubeService>().await, ["hello"]);
    let labels = c.deployment().await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels["sless.kube5s.ru/kind"], "service");
}

#[tokio::test]
async fn status_written_by_the_api_survives_reconciles_of_other_fields() {
    // The API marks an upload Building; the controller's next pass owns the status.
    let c = cluster().await;
    c.store
        .create_typed::<Function>(NS, "hello", &function_spec(None))
        .await
        .unwrap();
    modify_status::<Function, _>(&*c.store, NS, "hello", |f| {
        f.status.phase = Phase::Building;
        f.status.message = Some("build queued".into());
    })
    .await
    .unwrap();
    c.reconcile_function().await;
    let status = c.function().await.status.unwrap();
    assert_eq!(
        status.phase,
        Phase::Pending,
        "no code: the controller corrects it"
    );
}

#[tokio::test]
async fn a_service_named_like_an_older_function_fails_and_the_function_keeps_serving() {
    let c = cluster().await;
    c.ready_function().await;
    let function = c.function().await;
    let function_created = function.metadata.creation_timestamp.clone().unwrap().0;
    // As `kubectl apply` creates it, past the REST API's check.
    let mut service = sless_core::model::Service::new(
        "hello",
        sless_core::model::ServiceSpec {
            workload: function_spec(Some(KEY)).workload,
        },
    );
    service.metadata.creation_timestamp = Some(Time(
        function_created + k8s_openapi::jiff::SignedDuration::from_secs(5),
    ));
    let services = c.api::<sless_core::model::Service>(NS);
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let service = services.get("hello").await.unwrap();
    operator::controller::reconcile_service(Arc::new(service), c.ctx.clone())
        .await
        .unwrap();

    let status = services.get("hello").await.unwrap().status.unwrap();
    assert_eq!(status.phase, Phase::Failed);
    let message = status.message.unwrap();
    assert!(
        message.contains("a function named \"hello\" already exists"),
        "{message}"
    );
    let labels = c.deployment().await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels["sless.kube5s.ru/kind"], "function");
    assert_eq!(c.builds().await.len(), 1, "no build for the service");
    c.reconcile_function().await;
    assert_eq!(c.function().await.status.unwrap().phase, Phase::Ready);
}

#[tokio::test]
async fn a_cron_job_the_api_server_refuses_is_reported_in_the_trigger_status() {
    let refusing = kube_fake_client::interceptor::Funcs::new().patch(|ctx| {
        if ctx.patch["kind"] == "CronJob" {
            return Err(kube_fake_client::Error::InvalidRequest(format!(
                "CronJob.batch {:?} is invalid: spec.schedule: Invalid value: \"*/5 * * * *\": \
                 refused by policy",
                ctx.name
            )));
        }
        Ok(None)
    });
    let c = cluster_on(fake_client_with(refusing).await, config());
    c.ready_function().await;
    c.store
        .create_typed::<Trigger>(NS, "tick", &trigger_spec(TriggerType::Cron, true))
        .await
        .unwrap();
    c.reconcile_trigger("tick").await;

    let status = c
        .api::<Trigger>(NS)
        .get("tick")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!status.active);
    let message = status.message.unwrap();
    assert!(
        message.starts_with("Kubernetes refused the CronJob: ")
            && message.contains("refused by policy"),
        "{message}"
    );
}

#[tokio::test]
async fn a_crash_loop_fails_the_function_with_the_kubelets_reason_until_it_recovers() {
    let c = cluster().await;
    c.ready_function().await;
    c.store
        .create_typed::<Trigger>(NS, "web", &trigger_spec(TriggerType::Http, true))
        .await
        .unwrap();
    c.reconcile_function().await;
    c.waiting_pod("CrashLoopBackOff", "OOMKilled").await;
    c.reconcile_function().await;
    let status = c.function().await.status.unwrap();
    assert_eq!(status.phase, Phase::Failed, "{status:?}");
    let message = status.message.unwrap();
    assert!(
        message.starts_with("pod hello-7d9f-x2: CrashLoopBackOff: back-off 2m40s"),
        "{message}"
    );
    assert!(message.contains("last exit: OOMKilled"), "{message}");
    // The typed Function has no `conditions`: read them as stored.
    let raw: Api<DynamicObject> =
        Api::namespaced_with(c.client.clone(), NS, &ApiResource::erase::<Function>(&()));
    let conditions = raw.get("hello").await.unwrap().data["status"]["conditions"].clone();
    let condition = |kind: &str| {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in {conditions}"))
    };
    assert_eq!(condition("Ready")["status"], "False");
    assert_eq!(condition("Ready")["reason"], "CrashLoopBackOff");
    assert_eq!(condition("ContainerHealthy")["status"], "False");
    assert_eq!(condition("ContainerHealthy")["reason"], "CrashLoopBackOff");
    assert_eq!(condition("ResourcesAvailable")["status"], "False");

    // A failed rollout is not a failed build: the next reconcile looks again, and
    // once the Deployment is available the function is Ready.
    c.roll_out().await;
    c.reconcile_function().await;
    let status = c.function().await.status.unwrap();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
    assert_eq!(c.builds().await.len(), 1, "never built twice");
}

#[tokio::test]
async fn a_run_whose_image_cannot_be_pulled_fails_with_the_kubelets_reason() {
    let c = cluster().await;
    c.ready_function().await;
    c.store
        .create_typed::<FunctionJob>(NS, "nightly", &job_spec(1))
        .await
        .unwrap();
    c.reconcile_job("nightly").await;
    let job = c.api::<Job>(DEPLOY_NS).get("nightly-run-1").await.unwrap();
    let template = job.spec.unwrap().template;
    let mut labels = template.metadata.unwrap().labels.unwrap();
    labels.insert(
        "batch.kubernetes.io/job-name".into(),
        "nightly-run-1".into(),
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "nightly-run-1-abcde", "namespace": DEPLOY_NS, "labels": labels},
        "spec": template.spec,
        "status": {"phase": "Pending", "containerStatuses": [{
            "name": "run", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                                  "message": "Back-off pulling image \"x\""}},
        }]},
    }))
    .unwrap();
    c.api::<Pod>(DEPLOY_NS)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    c.reconcile_job("nightly").await;
    let status = c
        .api::<FunctionJob>(NS)
        .get("nightly")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    let message = status.message.unwrap();
    assert!(
        message.contains("pod nightly-run-1-abcde: ImagePullBackOff: Back-off pulling image"),
        "{message}"
    );
    // Stopped rather than left waiting for its deadline.
    assert!(
        c.api::<Job>(DEPLOY_NS)
            .get_opt("nightly-run-1")
            .await
            .unwrap()
            .is_none()
    );
}
