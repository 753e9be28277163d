//! Data sources: one function (or service) by name, and the namespace's listing.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_api::WorkloadResponse;
use sless_client::client::{Client, ClientError, Kind};
use tf_provider::schema::AttributeConstraint::{Computed, Required};
use tf_provider::schema::{AttributeType, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{DataSource, Diagnostics};

use crate::common::{Shared, attribute, block, client, is_not_found, report};

/// What both data sources tell about a function or service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    name: Value<String>,
    kind: Value<String>,
    runtime: Value<String>,
    entrypoint: Value<String>,
    memory_mb: Value<i64>,
    cpu_millis: Value<i64>,
    disk_mb: Value<i64>,
    timeout_sec: Value<i64>,
    phase: Value<String>,
    url: Value<String>,
    image_ref: Value<String>,
    last_built_at: Value<String>,
}

impl From<&WorkloadResponse> for Summary {
    fn from(workload: &WorkloadResponse) -> Self {
        Self {
            name: Value::Value(workload.name.clone()),
            kind: Value::Value(workload.kind.to_string()),
            runtime: Value::Value(workload.runtime.clone()),
            entrypoint: Value::Value(workload.entrypoint.clone()),
            memory_mb: Value::Value(workload.memory_mb.into()),
            cpu_millis: Value::Value(workload.cpu_millis.into()),
            disk_mb: Value::Value(workload.disk_mb.into()),
            timeout_sec: Value::Value(workload.timeout_sec.into()),
            phase: Value::Value(workload.phase.to_string()),
            url: workload.url.clone().into(),
            image_ref: workload.image_ref.clone().into(),
            last_built_at: workload.last_built_at.clone().into(),
        }
    }
}

fn summary_types() -> HashMap<String, AttributeType> {
    use AttributeType::{Number, String};
    HashMap::from([
        ("name".into(), String),
        ("kind".into(), String),
        ("runtime".into(), String),
        ("entrypoint".into(), String),
        ("memory_mb".into(), Number),
        ("cpu_millis".into(), Number),
        ("disk_mb".into(), Number),
        ("timeout_sec".into(), Number),
        ("phase".into(), String),
        ("url".into(), String),
        ("image_ref".into(), String),
        ("last_built_at".into(), String),
    ])
}

/// A function by name, else a service of that name (they share one name space).
async fn find(client: &Client, name: &str) -> Result<Option<WorkloadResponse>, ClientError> {
    for kind in [Kind::Function, Kind::Service] {
        match client.get_workload(kind, name).await {
            Ok(workload) => return Ok(Some(workload)),
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

pub struct FunctionData {
    client: Shared,
}

impl FunctionData {
    pub fn new(client: Shared) -> Self {
        Self { client }
    }
}

#[async_trait]
impl DataSource for FunctionData {
    type State<'a> = Summary;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let mut attributes: HashMap<_, _> = summary_types()
            .into_iter()
            .map(|(name, kind)| (name, attribute(kind, Computed, "As the API reports it.")))
            .collect();
        attributes.insert(
            "name".into(),
            attribute(
                AttributeType::String,
                Required,
                "Name of the function or service.",
            ),
        );
        Some(Schema {
            version: 1,
            block: block(
                "A function or service of the namespace, by name.",
                attributes,
            ),
        })
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::State<'a>> {
        let client = client(&self.client, diags)?;
        let name = config.name.as_option().unwrap_or_default();
        match find(&client, &name).await {
            Ok(Some(workload)) => Some(Summary::from(&workload)),
            Ok(None) => {
                diags.root_error_short(format!(
                    "no function or service named {name:?} in namespace {}",
                    client.namespace()
                ));
                None
            }
            Err(e) => {
                report(diags, format!("reading function {name}"), &e);
                None
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    namespace: Value<String>,
    functions: Value<Vec<Summary>>,
}

pub struct FunctionsData {
    client: Shared,
}

impl FunctionsData {
    pub fn new(client: Shared) -> Self {
        Self { client }
    }
}

#[async_trait]
impl DataSource for FunctionsData {
    type State<'a> = Listing;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let item = AttributeType::Object(summary_types());
        Some(Schema {
            version: 1,
            block: block(
                "Every function and service of the namespace, by name (kind tells which).",
                HashMap::from([
                    (
                        "namespace".into(),
                        attribute(AttributeType::String, Computed, "The namespace listed."),
                    ),
                    (
                        "functions".into(),
                        attribute(
                            AttributeType::List(Box::new(item)),
                            Computed,
                            "The functions and services.",
                        ),
                    ),
                ]),
            ),
        })
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        _config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::State<'a>> {
        let client = client(&self.client, diags)?;
        let mut all = Vec::new();
        for kind in [Kind::Function, Kind::Service] {
            match client.list_workloads(kind).await {
                Ok(list) => all.extend(list),
                Err(e) => {
                    report(diags, "listing functions".into(), &e);
                    return None;
                }
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Some(Listing {
            namespace: Value::Value(client.namespace().to_string()),
            functions: Value::Value(all.iter().map(Summary::from).collect()),
        })
    }
}
