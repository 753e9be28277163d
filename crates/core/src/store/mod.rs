//! The store seam: where resources and their status live. The REST API and the runners
//! talk only to [`Store`]; embedded mode implements it on SQLite (`sless-embedded`),
//! Kubernetes mode on CustomResources (`sless-operator`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::NamespaceResourceScope;
use kube::core::object::{HasSpec, HasStatus};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::error_text::BoxError;
use crate::model::{
    Function, FunctionJob, FunctionSpec, Kind, Service, ServiceSpec, Trigger, WorkloadKind,
    WorkloadSpec, WorkloadStatus,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{} {name:?} not found in namespace {namespace}", kind.noun())]
    NotFound {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error("{} {name:?} already exists in namespace {namespace}", kind.noun())]
    AlreadyExists {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error(
        "{} {name:?} was changed by someone else (resource_version {expected} is stale); \
         read it again and retry",
        kind.noun()
    )]
    Conflict {
        kind: Kind,
        name: String,
        expected: String,
    },
    /// `part` is what did not decode (`spec`, `status`, a column).
    #[error("stored {kind} {name:?} cannot be read: {part}: {source}")]
    Corrupt {
        kind: Kind,
        name: String,
        part: &'static str,
        #[source]
        source: BoxError,
    },
    /// A create past the namespace's quota ([`crate::quota::QuotaStore`]).
    #[error(transparent)]
    Quota(#[from] crate::quota::QuotaExceeded),
    /// `context` names the backend or what failed (`kubernetes`, `cannot open <file>`).
    #[error("store unavailable: {context}: {source}")]
    Backend {
        context: String,
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    pub fn backend(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            context: context.into(),
            source: source.into(),
        }
    }

    /// An object whose `part` does not decode (or encode).
    pub fn corrupt(
        kind: Kind,
        name: &str,
        part: &'static str,
        source: impl Into<BoxError>,
    ) -> Self {
        StoreError::Corrupt {
            kind,
            name: name.to_string(),
            part,
            source: source.into(),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Metadata every stored object has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Meta {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Opaque; an update naming a stale version is a conflict.
    pub resource_version: String,
    /// RFC 3339.
    pub created_at: String,
    pub annotations: BTreeMap<String, String>,
}

/// An object as the store keeps it: spec and status as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct RawObject {
    pub kind: Kind,
    pub meta: Meta,
    pub spec: serde_json::Value,
    pub status: serde_json::Value,
}

/// What changed; the runner re-reads the object (it may be gone).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

/// A write of an object's spec (create, update, delete), as a [`SpecWriteHook`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct SpecWrite<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The spec written; None when the object was deleted.
    pub spec: Option<&'a serde_json::Value>,
}

/// Told of every spec write before the write returns, so that what must know of an
/// acknowledged object (the embedded route table) knows before the writer's answer;
/// [`Store::subscribe`]'s notifications come later.
pub type SpecWriteHook = Arc<dyn Fn(&SpecWrite<'_>) + Send + Sync>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Calls `hook` with each spec write from now on, before the write returns; false
    /// for a store that cannot (its watchers learn of writes only by
    /// [`Store::subscribe`]).
    fn hook_spec_writes(&self, hook: SpecWriteHook) -> bool {
        let _ = hook;
        false
    }
    /// Records the namespace; `true` if this call created it. Idempotent under concurrency.
    async fn ensure_namespace(&self, namespace: &str) -> Result<bool>;
    /// Objects of a kind in one namespace, or in all namespaces (`None`), ordered by name.
    async fn list(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<RawObject>>;
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<RawObject>>;
    /// How many objects of a kind a namespace holds. This default lists them.
    async fn count(&self, kind: Kind, namespace: &str) -> Result<u64> {
        Ok(self.list(kind, Some(namespace)).await?.len() as u64)
    }
    /// The triggers of a namespace that name `function`, ordered by name. This default
    /// lists them all.
    async fn triggers_of(&self, namespace: &str, function: &str) -> Result<Vec<RawObject>> {
        let mut all = self.list(Kind::Trigger, Some(namespace)).await?;
        all.retain(|t| t.spec.get("functionRef").and_then(|f| f.as_str()) == Some(function));
        Ok(all)
    }
    /// Creates with a default status; the namespace is ensured. `AlreadyExists` if taken;
    /// a store that can (SQLite) also refuses, in the same write, a name held by the kind
    /// this one shares names with (`Kind::shares_names_with`), so racing creates of a
    /// function and a service leave one.
    async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
        status: serde_json::Value,
    ) -> Result<RawObject>;
    /// Writes spec and annotations if `object.meta.resource_version` is current.
    async fn update(&self, object: &RawObject) -> Result<RawObject>;
    /// Writes status only (the status subresource), if the version is current.
    async fn update_status(&self, object: &RawObject) -> Result<RawObject>;
    /// Read-modify-write of one part of the current object: `change` edits it and the
    /// result is written whatever other writers did meanwhile (their writes are not
    /// lost: `change` sees them). This default retries on conflicts; a store with
    /// transactions does it in one, so it never fails for a concurrent writer.
    async fn modify(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        part: Part,
        change: &mut (dyn for<'o> FnMut(&'o mut RawObject) -> Result<()> + Send),
    ) -> Result<RawObject> {
        const ATTEMPTS: usize = 8;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let mut object =
                self.get(kind, namespace, name)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        kind,
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    })?;
            change(&mut object)?;
            let written = match part {
                Part::Spec => self.update(&object).await,
                Part::Status => self.update_status(&object).await,
            };
            match written {
                Err(e @ StoreError::Conflict { .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| StoreError::backend("modify", "retries exhausted")))
    }
    /// `true` if something was deleted.
    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<bool>;
    /// Every successful write is announced here, after it is durable.
    fn subscribe(&self) -> broadcast::Receiver<Change>;
}

/// What a write changes: spec and annotations, or status (the status subresource).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Spec,
    Status,
}

/// Ties a CustomResource type to its kind and its spec/status types.
pub trait Resource {
    const KIND: Kind;
    type Spec: Serialize + DeserializeOwned + Clone + Send + Sync;
    type Status: Serialize + DeserializeOwned + Clone + Default + Send + Sync;
}

macro_rules! resource {
    ($ty:ty, $kind:expr, $spec:ty, $status:ty) => {
        impl Resource for $ty {
            const KIND: Kind = $kind;
            type Spec = $spec;
            type Status = $status;
        }
    };
}
resource!(
    Function,
    Kind::Function,
    crate::model::FunctionSpec,
    crate::model::WorkloadStatus
);
resource!(
    Service,
    Kind::Service,
    crate::model::ServiceSpec,
    crate::model::WorkloadStatus
);
resource!(
    Trigger,
    Kind::Trigger,
    crate::model::TriggerSpec,
    crate::model::TriggerStatus
);
resource!(
    FunctionJob,
    Kind::FunctionJob,
    crate::model::FunctionJobSpec,
    crate::model::FunctionJobStatus
);

/// A typed stored object.
#[derive(Clone, Debug)]
pub struct Object<R: Resource> {
    pub meta: Meta,
    pub spec: R::Spec,
    pub status: R::Status,
}

impl<R: Resource> Object<R> {
    pub fn from_raw(raw: RawObject) -> Result<Self> {
        let name = &raw.meta.name;
        let corrupt = |part| move |e| StoreError::corrupt(R::KIND, name, part, e);
        let spec = serde_json::from_value(raw.spec.clone()).map_err(corrupt("spec"))?;
        let status = if raw.status.is_null() {
            R::Status::default()
        } else {
            serde_json::from_value(raw.status.clone()).map_err(corrupt("status"))?
        };
        Ok(Self {
            meta: raw.meta,
            spec,
            status,
        })
    }

    fn to_raw(&self) -> Result<RawObject> {
        let name = &self.meta.name;
        let encode = |part| move |e| StoreError::corrupt(R::KIND, name, part, e);
        Ok(RawObject {
            kind: R::KIND,
            meta: self.meta.clone(),
            spec: serde_json::to_value(&self.spec).map_err(encode("spec"))?,
            status: serde_json::to_value(&self.status).map_err(encode("status"))?,
        })
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.meta.annotations.get(key).map(String::as_str)
    }
}

/// Typed access on top of the JSON-level seam.
#[async_trait]
pub trait StoreExt {
    async fn get_typed<R: Resource>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Object<R>>>;
    async fn list_typed<R: Resource>(&self, namespace: Option<&str>) -> Result<Vec<Object<R>>>;
    async fn create_typed<R: Resource>(
        &self,
        namespace: &str,
        name: &str,
        spec: &R::Spec,
    ) -> Result<Object<R>>;
    async fn update_typed<R: Resource>(&self, object: &Object<R>) -> Result<Object<R>>;
    async fn update_status_typed<R: Resource>(&self, object: &Object<R>) -> Result<Object<R>>;
}

#[async_trait]
impl StoreExt for dyn Store {
    async fn get_typed<R: Resource>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Object<R>>> {
        self.get(R::KIND, namespace, name)
            .await?
            .map(Object::from_raw)
            .transpose()
    }

    async fn list_typed<R: Resource>(&self, namespace: Option<&str>) -> Result<Vec<Object<R>>> {
        self.list(R::KIND, namespace)
            .await?
            .into_iter()
            .map(Object::from_raw)
            .collect()
    }

    async fn create_typed<R: Resource>(
        &self,
        namespace: &str,
        name: &str,
        spec: &R::Spec,
    ) -> Result<Object<R>> {
        let encode = |part| move |e| StoreError::corrupt(R::KIND, name, part, e);
        let spec = serde_json::to_value(spec).map_err(encode("spec"))?;
        let status = serde_json::to_value(R::Status::default()).map_err(encode("status"))?;
        Object::from_raw(self.create(R::KIND, namespace, name, spec, status).await?)
    }

    async fn update_typed<R: Resource>(&self, object: &Object<R>) -> Result<Object<R>> {
        Object::from_raw(self.update(&object.to_raw()?).await?)
    }

    async fn update_status_typed<R: Resource>(&self, object: &Object<R>) -> Result<Object<R>> {
        Object::from_raw(self.update_status(&object.to_raw()?).await?)
    }
}

/// Functions and Services: the kinds that carry a [`WorkloadSpec`] and a [`WorkloadStatus`].
/// The API handlers use it on store [`Object`]s, the Kubernetes controller on the
/// CustomResources themselves: hence kube-core's traits (no client) as supertraits.
pub trait WorkloadResource:
    Resource<Status = WorkloadStatus>
    + kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + HasSpec<Spec = <Self as Resource>::Spec>
    + HasStatus<Status = WorkloadStatus>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    const WORKLOAD: WorkloadKind;
    fn workload(spec: &<Self as Resource>::Spec) -> &WorkloadSpec;
    fn workload_mut(spec: &mut <Self as Resource>::Spec) -> &mut WorkloadSpec;
    fn from_workload(workload: WorkloadSpec) -> <Self as Resource>::Spec;
}

macro_rules! workload_resource {
    ($ty:ty, $kind:expr, $spec:ident) => {
        impl WorkloadResource for $ty {
            const WORKLOAD: WorkloadKind = $kind;
            fn workload(spec: &$spec) -> &WorkloadSpec {
                &spec.workload
            }
            fn workload_mut(spec: &mut $spec) -> &mut WorkloadSpec {
                &mut spec.workload
            }
            fn from_workload(workload: WorkloadSpec) -> $spec {
                $spec { workload }
            }
        }
    };
}
workload_resource!(Function, WorkloadKind::Function, FunctionSpec);
workload_resource!(Service, WorkloadKind::Service, ServiceSpec);

/// Read-modify-write of the spec (see [`Store::modify`]).
pub async fn modify<R, F>(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    change: F,
) -> Result<Object<R>>
where
    R: Resource,
    F: FnMut(&mut Object<R>) + Send,
{
    modify_part(store, namespace, name, Part::Spec, change).await
}

/// Read-modify-write of the status (see [`Store::modify`]).
pub async fn modify_status<R, F>(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    change: F,
) -> Result<Object<R>>
where
    R: Resource,
    F: FnMut(&mut Object<R>) + Send,
{
    modify_part(store, namespace, name, Part::Status, change).await
}

async fn modify_part<R, F>(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    part: Part,
    mut change: F,
) -> Result<Object<R>>
where
    R: Resource,
    F: FnMut(&mut Object<R>) + Send,
{
    let mut typed = |raw: &mut RawObject| -> Result<()> {
        let mut object = Object::<R>::from_raw(raw.clone())?;
        change(&mut object);
        *raw = object.to_raw()?;
        Ok(())
    };
    Object::from_raw(
        store
            .modify(R::KIND, namespace, name, part, &mut typed)
            .await?,
    )
}
