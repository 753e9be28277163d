//! The emulator through a real kube-rs client over loopback HTTP.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kube_emulator::Emulator;
use operator::controller::{JobOutcome, job_outcome};
use serde_json::{Value, json};

async fn start() -> (Emulator, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (emulator, addr) = Emulator::start().await.expect("emulator starts");
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    (emulator, client)
}

fn status_of(error: kube::Error) -> Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .expect("a config map")
}

async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
}

#[tokio::test]
async fn create_get_and_failure_statuses() {
    let (_emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = maps
        .create(
            &PostParams::default(),
            &config_map("a", json!({}), json!({"k": "v"})),
        )
        .await
        .unwrap();
    assert_eq!(created.namespace().as_deref(), Some("default"));
    assert!(!created.uid().unwrap().is_empty());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let first_rv: u64 = created.resource_version().unwrap().parse().unwrap();

    let fetched = maps.get("a").await.unwrap();
    assert_eq!(fetched.data.unwrap()["k"], "v");

    let missing = status_of(maps.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "configmaps \"nope\" not found");
    assert!(missing.is_failure());
    assert_eq!(missing.details.unwrap().name, "nope");

    let again = maps
        .create(
            &PostParams::default(),
            &config_map("a", json!({}), json!({})),
        )
        .await
        .unwrap_err();
    let again = status_of(again);
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "configmaps \"a\" already exists");

    // A replace carrying a stale resourceVersion is refused.
    let mut stale = fetched_with(&maps, "a").await;
    stale.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = maps
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap();
    let second_rv: u64 = updated.resource_version().unwrap().parse().unwrap();
    assert!(second_rv > first_rv);
    let conflict = status_of(
        maps.replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));

    // generateName, and a namespace that does not exist.
    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let generated = maps
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(generated.name_any().starts_with("gen-") && generated.name_any().len() == 9);
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "absent");
    let no_ns = status_of(
        elsewhere
            .create(
                &PostParams::default(),
                &config_map("x", json!({}), json!({})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (no_ns.code, no_ns.message.as_str()),
        (404, "namespaces \"absent\" not found")
    );

    // A dry run answers as the write would, and stores nothing.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let tried = maps
        .create(&dry, &config_map("dry", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(tried.name_any(), "dry");
    assert!(maps.get_opt("dry").await.unwrap().is_none());
    let dry_again = status_of(
        maps.create(&dry, &config_map("a", json!({}), json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(dry_again.code, 409);

    // Names and label values are validated like the API server does.
    let bad = status_of(
        maps.create(
            &PostParams::default(),
            &config_map("Bad_Name", json!({}), json!({})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"));
    assert!(
        bad.message
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name"),
        "{}",
        bad.message
    );
    let long_label = config_map("l", json!({"sha": "x".repeat(64)}), json!({}));
    let bad = status_of(
        maps.create(&PostParams::default(), &long_label)
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 422);
}

async fn fetched_with(maps: &Api<ConfigMap>, name: &str) -> ConfigMap {
    maps.get(name).await.unwrap()
}

#[tokio::test]
async fn lists_filter_by_label_and_field_selectors_across_namespaces() {
    let (_emu, client) = start().await;
    create_namespace(&client, "other").await;
    for (ns, name, labels) in [
        ("default", "web-1", json!({"app": "web", "tier": "front"})),
        ("default", "db-1", json!({"app": "db"})),
        ("other", "web-2", json!({"app": "web"})),
    ] {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        maps.create(&PostParams::default(), &config_map(name, labels, json!({})))
            .await
            .unwrap();
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        let mut names: Vec<String> = list.items.iter().map(|m| m.name_any()).collect();
        names.sort();
        names
    };
    let all: Api<ConfigMap> = Api::all(client.clone());
    let default: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let list = all.list(&ListParams::default()).await.unwrap();
    assert!(list.metadata.resource_version.is_some());
    assert_eq!(names(list), ["db-1", "web-1", "web-2"]);
    let by = |selector: &str| ListParams::default().labels(selector);
    assert_eq!(
        names(all.list(&by("app=web")).await.unwrap()),
        ["web-1", "web-2"]
    );
    assert_eq!(
        names(default.list(&by("app=web")).await.unwrap()),
        ["web-1"]
    );
    assert_eq!(names(all.list(&by("app!=web")).await.unwrap()), ["db-1"]);
    assert_eq!(
        names(all.list(&by("app in (db,x)")).await.unwrap()),
        ["db-1"]
    );
    assert_eq!(
        names(all.list(&by("app notin (db)")).await.unwrap()),
        ["web-1", "web-2"]
    );
    assert_eq!(names(all.list(&by("tier")).await.unwrap()), ["web-1"]);
    assert_eq!(
        names(all.list(&by("!tier,app=web")).await.unwrap()),
        ["web-2"]
    );
    let fields = ListParams::default().fields("metadata.namespace=other");
    assert_eq!(names(all.list(&fields).await.unwrap()), ["web-2"]);
    let fields = ListParams::default().fields("metadata.name!=db-1");
    assert_eq!(names(default.list(&fields).await.unwrap()), ["web-1"]);
}

/// Waits for the next watcher event that is not an error.
async fn next_event<S>(stream: &mut S) -> watcher::Event<ConfigMap>
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on");
        if let Ok(event) = next {
            return event;
        }
    }
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted_with_selectors() {
    let (_emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    maps.create(
        &PostParams::default(),
        &config_map("before", json!({"w": "yes"}), json!({})),
    )
    .await
    .unwrap();
    let config = watcher::Config::default().labels("w=yes");
    let mut events = watcher(maps.clone(), config).boxed();
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::Init
    ));
    match next_event(&mut events).await {
        watcher::Event::InitApply(m) => assert_eq!(m.name_any(), "before"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::InitDone
    ));

    maps.create(
        &PostParams::default(),
        &config_map("other", json!({"w": "no"}), json!({})),
    )
    .await
    .unwrap();
    maps.create(
        &PostParams::default(),
        &config_map("live", json!({"w": "yes"}), json!({})),
    )
    .await
    .unwrap();
    match next_event(&mut events).await {
        watcher::Event::Apply(m) => assert_eq!(m.name_any(), "live"),
        other => panic!("{other:?}"),
    }
    let patch = Patch::Merge(json!({"data": {"x": "1"}}));
    maps.patch("live", &PatchParams::default(), &patch)
        .await
        .unwrap();
    match next_event(&mut events).await {
        watcher::Event::Apply(m) => assert_eq!(m.data.unwrap()["x"], "1"),
        other => panic!("{other:?}"),
    }
    // Leaving the selection reads as a deletion to this watch.
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"w": "no"}}}));
    maps.patch("before", &PatchParams::default(), &relabel)
        .await
        .unwrap();
    match next_event(&mut events).await {
        watcher::Event::Delete(m) => assert_eq!(m.name_any(), "before"),
        other => panic!("{other:?}"),
    }
    maps.delete("live", &DeleteParams::default()).await.unwrap();
    match next_event(&mut events).await {
        watcher::Event::Delete(m) => assert_eq!(m.name_any(), "live"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn expired_resource_version_is_gone_and_the_watcher_relists() {
    let (emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    maps.create(
        &PostParams::default(),
        &config_map("a", json!({}), json!({})),
    )
    .await
    .unwrap();
    emu.compact_history();
    let mut raw = maps
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match raw.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    assert!(
        raw.try_next().await.unwrap().is_none(),
        "the stream ends after 410"
    );

    // A watcher whose watch times out resumes from its last version; once that is
    // compacted away it gets 410 and lists again.
    let config = watcher::Config::default().labels("w=yes").timeout(1);
    let mut events = watcher(maps.clone(), config).boxed();
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::Init
    ));
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::InitDone
    ));
    let lists_before = lists(&emu);
    maps.create(
        &PostParams::default(),
        &config_map("unseen", json!({}), json!({})),
    )
    .await
    .unwrap();
    emu.compact_history();
    let mut saw_gone = false;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the watcher reacts within 10 s")
            .unwrap();
        match next {
            Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_gone = true,
            Ok(watcher::Event::Init) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_gone);
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::InitDone
    ));
    assert_eq!(lists(&emu), lists_before + 1, "one relist");
}

/// Plain (not watch) GETs of the default namespace's config maps.
fn lists(emu: &Emulator) -> usize {
    emu.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/namespaces/default/configmaps")
        .filter(|r| !r.query.contains("watch="))
        .count()
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_then_changes() {
    let (emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    maps.create(
        &PostParams::default(),
        &config_map("first", json!({}), json!({})),
    )
    .await
    .unwrap();
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(maps.clone(), config).boxed();
    // kube-runtime emits no Init for a streaming list.
    match next_event(&mut events).await {
        watcher::Event::InitApply(m) => assert_eq!(m.name_any(), "first"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next_event(&mut events).await,
        watcher::Event::InitDone
    ));
    maps.create(
        &PostParams::default(),
        &config_map("second", json!({}), json!({})),
    )
    .await
    .unwrap();
    match next_event(&mut events).await {
        watcher::Event::Apply(m) => assert_eq!(m.name_any(), "second"),
        other => panic!("{other:?}"),
    }
    assert_eq!(lists(&emu), 0, "no list call with streaming lists");
}

#[tokio::test]
async fn watch_replays_from_a_version_and_sends_bookmarks() {
    let (_emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = maps
        .create(
            &PostParams::default(),
            &config_map("one", json!({}), json!({})),
        )
        .await
        .unwrap();
    maps.create(
        &PostParams::default(),
        &config_map("two", json!({}), json!({})),
    )
    .await
    .unwrap();
    let params = WatchParams::default().timeout(7);
    let mut raw = maps
        .watch(&params, &first.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    match raw.try_next().await.unwrap() {
        Some(WatchEvent::Added(m)) => assert_eq!(m.name_any(), "two"),
        other => panic!("{other:?}"),
    }
    let bookmark = tokio::time::timeout(Duration::from_secs(7), raw.try_next())
        .await
        .expect("a bookmark within 7 s")
        .unwrap();
    match bookmark {
        Some(WatchEvent::Bookmark(b)) => assert!(!b.metadata.resource_version.is_empty()),
        other => panic!("{other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(5), raw.try_next()).await;
    assert!(
        matches!(end, Ok(Ok(None))),
        "timeoutSeconds ends the stream"
    );
}

#[tokio::test]
async fn patches_merge_json_and_server_side_apply() {
    let (_emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let apply = PatchParams::apply("tester").force();

    // Apply creates what is missing.
    let created = maps
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied", "labels": {"a": "1"}},
                "data": {"x": "1"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap()["x"], "1");
    // Applying again merges into what another writer set, and drops what this
    // manager applied before and no longer does.
    maps.patch(
        "applied",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"c": "3"}}, "data": {"other": "kept"}})),
    )
    .await
    .unwrap();
    let merged = maps
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied", "labels": {"b": "2"}},
                "data": {"x": "2"},
            })),
        )
        .await
        .unwrap();
    let data = merged.data.clone().unwrap();
    assert_eq!((data["x"].as_str(), data["other"].as_str()), ("2", "kept"));
    let labels: Vec<&String> = merged.labels().keys().collect();
    assert_eq!(labels, ["b", "c"]);
    // Applying the same thing again is no write.
    let again = maps
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied", "labels": {"b": "2"}},
                "data": {"x": "2"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), merged.metadata.resource_version);

    // Merge patch: null removes.
    let patched = maps
        .patch(
            "applied",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"other": null}})),
        )
        .await
        .unwrap();
    assert!(!patched.data.as_ref().unwrap().contains_key("other"));

    // JSON patch, with the resourceVersion replaced as a precondition.
    let current = patched.resource_version().unwrap();
    let versioned = |rv: &str| -> Patch<()> {
        Patch::Json(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/data/y", "value": "3"},
            ]))
            .unwrap(),
        )
    };
    let ok = maps
        .patch("applied", &PatchParams::default(), &versioned(&current))
        .await
        .unwrap();
    assert_eq!(ok.data.unwrap()["y"], "3");
    let stale = status_of(
        maps.patch("applied", &PatchParams::default(), &versioned(&current))
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    let missing = status_of(
        maps.patch("none", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(missing.code, 404);
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
        "status": {"replicas": 9},
    }))
    .unwrap()
}

#[tokio::test]
async fn status_subresource_is_separate_from_the_main_resource() {
    let (emu, client) = start().await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let created = deployments
        .create(&PostParams::default(), &deployment("d"))
        .await
        .unwrap();
    assert!(created.status.is_none(), "status is not set through create");

    // The main resource ignores status; the spec change bumps generation.
    let main = deployments
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}, "status": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert!(main.status.is_none());
    assert_eq!(main.metadata.generation, Some(2));

    // The status subresource ignores the rest.
    let status = deployments
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}, "status": {"readyReplicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().ready_replicas, Some(2));
    assert_eq!(status.spec.unwrap().replicas, Some(2));
    assert_eq!(
        status.metadata.generation,
        Some(2),
        "status writes keep generation"
    );

    // Label changes keep generation too.
    let labelled = deployments
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2));

    // The selector is immutable.
    let selector = Patch::Merge(json!({"spec": {"selector": {"matchLabels": {"app": "x"}}}}));
    let immutable = status_of(
        deployments
            .patch("d", &PatchParams::default(), &selector)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (immutable.code, immutable.reason.as_str()),
        (422, "Invalid")
    );
    assert!(
        immutable
            .message
            .starts_with("Deployment.apps \"d\" is invalid: spec.selector: Invalid value: ")
            && immutable.message.ends_with("field is immutable"),
        "{}",
        immutable.message
    );

    // The handle plays a controller writing status.
    emu.update_status(
        "apps/v1",
        "deployments",
        Some("default"),
        "d",
        json!({"availableReplicas": 2}),
    )
    .unwrap();
    let seen = deployments.get("d").await.unwrap().status.unwrap();
    assert_eq!(
        (seen.available_replicas, seen.ready_replicas),
        (Some(2), None)
    );
}

#[tokio::test]
async fn deployments_default_to_one_replica_and_scale_through_their_subresource() {
    let (_emu, client) = start().await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut applied = deployment("d");
    applied.status = None;
    let apply = |manager: &str| PatchParams::apply(manager).force();
    let created = deployments
        .patch("d", &apply("owner"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(created.spec.unwrap().replicas, Some(1));
    let mut unsized_ = applied.clone();
    unsized_.spec.as_mut().unwrap().replicas = None;
    let defaulted = deployments
        .patch("d", &apply("owner"), &Patch::Apply(&unsized_))
        .await
        .unwrap();
    assert_eq!(
        defaulted.spec.unwrap().replicas,
        Some(1),
        "a replicas dropped by its owner is defaulted again"
    );

    let scale = deployments.get_scale("d").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=d"));
    let scaled = deployments
        .patch_scale(
            "d",
            &PatchParams {
                field_manager: Some("scaler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    assert_eq!(
        deployments.get("d").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
    // The owner applying without replicas keeps the scaler's.
    let reapplied = deployments
        .patch("d", &apply("owner"), &Patch::Apply(&unsized_))
        .await
        .unwrap();
    assert_eq!(reapplied.spec.unwrap().replicas, Some(3));

    let negative = status_of(
        deployments
            .patch_scale(
                "d",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": -1}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(negative.code, 422, "{negative:?}");
    assert!(
        negative.message.contains("spec.replicas"),
        "{}",
        negative.message
    );

    // HorizontalPodAutoscalers are stored and listed like any resource.
    let hpas: Api<DynamicObject> = Api::default_namespaced_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
            "horizontalpodautoscalers",
        ),
    );
    let mut hpa = DynamicObject::new(
        "d",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
            "horizontalpodautoscalers",
        ),
    );
    hpa.data = json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
        "minReplicas": 1, "maxReplicas": 5}});
    hpas.create(&PostParams::default(), &hpa).await.unwrap();
    assert_eq!(
        hpas.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_emu, client) = start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut held = config_map("held", json!({}), json!({}));
    held.metadata.finalizers = Some(vec!["sless.dev/cleanup".into()]);
    maps.create(&PostParams::default(), &held).await.unwrap();
    let mut events = watcher(maps.clone(), watcher::Config::default()).boxed();
    while !matches!(next_event(&mut events).await, watcher::Event::InitDone) {}

    let deleting = maps.delete("held", &DeleteParams::default()).await.unwrap();
    let object = deleting
        .left()
        .expect("the object is returned while finalizers hold it");
    assert!(object.metadata.deletion_timestamp.is_some());
    let still = maps.get("held").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    match next_event(&mut events).await {
        watcher::Event::Apply(m) => assert!(m.metadata.deletion_timestamp.is_some()),
        other => panic!("{other:?}"),
    }

    let more = Patch::Merge(json!({"metadata": {"finalizers": ["sless.dev/cleanup", "x/y"]}}));
    let refused = status_of(
        maps.patch("held", &PatchParams::default(), &more)
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains("no new finalizers"),
        "{}",
        refused.message
    );

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_of(maps.get("held").await.unwrap_err()).code, 404);
    match next_event(&mut events).await {
        watcher::Event::Delete(m) => assert_eq!(m.name_any(), "held"),
        other => panic!("{other:?}"),
    }

    // Without finalizers deletion is immediate.
    maps.create(
        &PostParams::default(),
        &config_map("free", json!({}), json!({})),
    )
    .await
    .unwrap();
    assert!(
        maps.delete("free", &DeleteParams::default())
            .await
            .unwrap()
            .is_right()
    );
    assert_eq!(status_of(maps.get("free").await.unwrap_err()).code, 404);
}

fn owned(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut child = config_map(name, json!({}), json!({}));
    child.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.name_any(), "uid": owner.uid().unwrap(),
    }))
    .unwrap()]);
    child
}

#[tokio::test]
async fn owner_references_cascade_deletion() {
    let (emu, client) = start().await;
    create_namespace(&client, "other").await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let parent = maps
        .create(&pp, &config_map("parent", json!({}), json!({})))
        .await
        .unwrap();
    let child = maps.create(&pp, &owned("child", &parent)).await.unwrap();
    maps.create(&pp, &owned("grandchild", &child))
        .await
        .unwrap();
    maps.create(&pp, &config_map("bystander", json!({}), json!({})))
        .await
        .unwrap();

    // An owner in another namespace does not count: the dependent is collected at once.
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "other");
    elsewhere
        .create(&pp, &owned("cross", &parent))
        .await
        .unwrap();
    assert!(elsewhere.get_opt("cross").await.unwrap().is_none());

    maps.delete("parent", &DeleteParams::default())
        .await
        .unwrap();
    let mut left: Vec<String> = maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    left.sort();
    assert_eq!(left, ["bystander"]);

    // A reference the collector cannot resolve (a kind it does not know) keeps the object.
    let mut unknown = config_map("unknown-owner", json!({}), json!({}));
    unknown.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "0000",
        }))
        .unwrap(),
    ]);
    maps.create(&pp, &unknown).await.unwrap();
    assert!(maps.get_opt("unknown-owner").await.unwrap().is_some());

    // Cluster-scoped owners and dependents cascade too.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_namespace(&client, "owner-ns").await;
    let owner = namespaces.get("owner-ns").await.unwrap();
    let dependent: Namespace = serde_json::from_value(json!({"metadata": {
        "name": "dependent-ns",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "owner-ns", "uid": owner.uid()}],
    }}))
    .unwrap();
    namespaces.create(&pp, &dependent).await.unwrap();
    namespaces
        .delete("owner-ns", &DeleteParams::default())
        .await
        .unwrap();
    assert!(namespaces.get_opt("dependent-ns").await.unwrap().is_none());

    // Deleting a namespace takes its content.
    elsewhere
        .create(&pp, &config_map("inside", json!({}), json!({})))
        .await
        .unwrap();
    namespaces
        .delete("other", &DeleteParams::default())
        .await
        .unwrap();
    assert!(emu.list("v1", "configmaps", Some("other")).is_empty());
}

#[tokio::test]
async fn pod_logs_honour_tail_lines() {
    let (emu, client) = start().await;
    emu.create(
        "v1",
        "pods",
        json!({"metadata": {"name": "p", "namespace": "default", "labels": {"batch.kubernetes.io/job-name": "j"}},
               "status": {"phase": "Succeeded"}}),
    )
    .unwrap();
    emu.set_pod_log("default", "p", "one\ntwo\nthree\n");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let through_api: Pod = serde_json::from_value(json!({
        "metadata": {"name": "new"}, "status": {"phase": "Running"},
    }))
    .unwrap();
    let created = pods
        .create(&PostParams::default(), &through_api)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        pods.get("p")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Succeeded")
    );
    let all = pods.logs("p", &Default::default()).await.unwrap();
    assert_eq!(all, "one\ntwo\nthree\n");
    let params = kube::api::LogParams {
        tail_lines: Some(2),
        ..Default::default()
    };
    assert_eq!(pods.logs("p", &params).await.unwrap(), "two\nthree\n");
    assert_eq!(
        status_of(pods.logs("q", &params).await.unwrap_err()).code,
        404
    );
    emu.delete("v1", "pods", Some("default"), "p").unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());
    assert!(emu.get("v1", "pods", Some("default"), "p").is_none());
}

#[tokio::test]
async fn the_handle_plays_the_job_controller() {
    let (emu, client) = start().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "build"},
        "spec": {"backoffLimit": 2, "template": {
            "metadata": {"labels": {"app": "b"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]},
        }},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(
        job_outcome(&jobs.get("build").await.unwrap()),
        JobOutcome::Running
    );

    let pod = emu
        .add_job_pod("default", "build", "Succeeded", "done\n")
        .unwrap();
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    assert!(pod_name.starts_with("build-"));
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let listed = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=build,app=b"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        pods.logs(&pod_name, &Default::default()).await.unwrap(),
        "done\n"
    );

    let completed = emu.complete_job("default", "build").unwrap();
    assert_eq!(
        completed["metadata"]["resourceVersion"],
        emu.resource_version().to_string()
    );
    assert_eq!(
        job_outcome(&jobs.get("build").await.unwrap()),
        JobOutcome::Succeeded
    );
    emu.fail_job("default", "build").unwrap();
    let failed = jobs.get("build").await.unwrap();
    assert_eq!(failed.status.as_ref().unwrap().failed, Some(3));
    assert!(matches!(job_outcome(&failed), JobOutcome::Failed { .. }));

    // The pod is the Job's dependent.
    jobs.delete("build", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt(&pod_name).await.unwrap().is_none());
}

#[tokio::test]
async fn requests_are_logged_per_client() {
    let (emu, _) = start().await;
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&emu.kubeconfig_yaml_for("reader")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = Client::try_from(config).unwrap();
    let maps: Api<ConfigMap> = Api::default_namespaced(client);
    maps.list(&ListParams::default()).await.unwrap();
    maps.create(
        &PostParams::default(),
        &config_map("w", json!({}), json!({})),
    )
    .await
    .unwrap();
    let reader: Vec<_> = emu
        .requests()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("reader"))
        .collect();
    assert_eq!(reader.len(), 2);
    assert_eq!(reader.iter().filter(|r| r.is_write()).count(), 1);
    assert_eq!((reader[1].method.as_str(), reader[1].status), ("POST", 201));
    assert_eq!(
        emu.request_count("POST", "/api/v1/namespaces/default/configmaps"),
        1
    );
    // Only what came after a point, as a load measurement reads it.
    let (_, seen) = emu.requests_after(0);
    maps.get("w").await.unwrap();
    let (after, total) = emu.requests_after(seen);
    assert_eq!(total, seen + 1);
    assert_eq!(
        after.iter().map(|r| r.method.as_str()).collect::<Vec<_>>(),
        ["GET"]
    );
    assert!(emu.requests_after(total).0.is_empty());
}

fn function_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sless.kube5s.ru", "v1alpha1", "Function"),
        "functions",
    )
}

fn function(name: &str, memory: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "sless.kube5s.ru/v1alpha1", "kind": "Function",
        "metadata": {"name": name},
        "spec": {"runtime": "python3.11", "entrypoint": "main.handler", "memoryMb": memory,
                 "timeoutSec": 30, "unknownField": "dropped"},
    }))
    .unwrap()
}

#[tokio::test]
async fn crds_define_validated_and_pruned_resources() {
    let (_emu, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let yaml = operator::crds::crds_yaml().unwrap();
    for document in yaml.split("\n---\n").filter(|d| d.contains("kind:")) {
        let crd: CustomResourceDefinition = serde_yaml::from_str(document).unwrap();
        let created = crds.create(&PostParams::default(), &crd).await.unwrap();
        let conditions = created.status.clone().unwrap().conditions.unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        );
        // Applying it again unchanged, as `kubectl apply` would, is no write.
        let apply = PatchParams::apply("installer").force();
        let again = crds
            .patch(&created.name_any(), &apply, &Patch::Apply(&crd))
            .await
            .unwrap();
        assert_eq!(again.resource_version(), created.resource_version());
    }

    // Discovery finds the new kinds.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery
        .get("sless.kube5s.ru")
        .expect("the group is discovered");
    let kinds: Vec<String> = group
        .recommended_resources()
        .iter()
        .map(|(r, _)| r.kind.clone())
        .collect();
    assert!(kinds.contains(&"Function".to_string()), "{kinds:?}");

    let functions: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &function_resource());
    let pp = PostParams::default();
    let created = functions
        .create(&pp, &function("ok", json!(128)))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["memoryMb"], 128);
    assert!(
        created.data["spec"].get("unknownField").is_none(),
        "unknown fields are pruned"
    );

    let too_big = status_of(
        functions
            .create(&pp, &function("big", json!(4294967296u64)))
            .await
            .unwrap_err(),
    );
    assert_eq!((too_big.code, too_big.reason.as_str()), (422, "Invalid"));
    assert!(
        too_big.message.starts_with("Function.sless.kube5s.ru \"big\" is invalid: ")
            && too_big.message.contains("spec.memoryMb: Invalid value: 4294967296: spec.memoryMb in body should be less than or equal to 4096"),
        "{}",
        too_big.message
    );
    let wrong_type = status_of(
        functions
            .create(&pp, &function("typed", json!("lots")))
            .await
            .unwrap_err(),
    );
    assert_eq!(wrong_type.code, 422);
    assert!(
        wrong_type
            .message
            .contains("spec.memoryMb in body must be of type integer"),
        "{}",
        wrong_type.message
    );
    let causes = wrong_type.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.memoryMb");

    // Patches are validated too; nothing was stored.
    let bad_patch = functions
        .patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runtime": "cobol"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(bad_patch).code, 422);
    assert_eq!(
        functions.get("ok").await.unwrap().data["spec"]["runtime"],
        "python3.11"
    );

    // The CRD declares a status subresource: status only goes through it.
    functions
        .patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert!(
        functions
            .get("ok")
            .await
            .unwrap()
            .data
            .get("status")
            .is_none()
    );
    let ready = functions
        .patch_status(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(ready.data["status"]["phase"], "Ready");

    // Deleting the CRD takes its resources away.
    crds.delete("functions.sless.kube5s.ru", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(status_of(functions.get("ok").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn a_request_without_an_answer_is_listed_as_open_until_it_ends() {
    use tokio::io::AsyncWriteExt;
    let (emu, client) = start().await;
    // Head sent, body promised but not sent: the server waits on the client.
    let mut stream = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    stream
        .write_all(
            b"POST /clients/slow/api/v1/namespaces/default/configmaps HTTP/1.1\r\n\
              host: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        )
        .await
        .unwrap();
    let open = loop {
        let open = emu.open_requests();
        if !open.is_empty() {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].client.as_deref(), open[0].method.as_str()),
        (Some("slow"), "POST")
    );
    assert_eq!(open[0].path, "/api/v1/namespaces/default/configmaps");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(emu.open_requests()[0].open_for >= Duration::from_millis(50));
    // Served requests are not open, and carry how long they took.
    let maps: Api<ConfigMap> = Api::default_namespaced(client);
    maps.list(&ListParams::default()).await.unwrap();
    assert_eq!(emu.open_requests().len(), 1);
    let listed = emu.requests().pop().unwrap();
    assert_eq!(listed.method, "GET");
    assert!(listed.duration > Duration::ZERO);
    // The client gives up: no longer open.
    drop(stream);
    for _ in 0..200 {
        if emu.open_requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(emu.open_requests().is_empty());
}
