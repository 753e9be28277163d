//! The provider block: where sless is and which token to act with.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_client::client::{Client, ClientError, Kind};
use tf_provider::schema::{AttributeConstraint::Optional, AttributeType, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, DynamicDataSource, DynamicResource, Provider};

use crate::common::{Shared, attribute, block};
use crate::data::{FunctionData, FunctionsData};
use crate::job::JobResource;
use crate::trigger::TriggerResource;
use crate::workload::WorkloadResource;

/// The CLI's default, so both reach a local `sless up` without settings.
const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

#[derive(Serialize, Deserialize)]
pub struct ProviderConfig {
    endpoint: Value<String>,
    token: Value<String>,
    namespace: Value<String>,
    nubes_endpoint: Value<String>,
}

#[derive(Default)]
pub struct SlessProvider {
    client: Shared,
}

/// A set value, else the environment variable, else nothing; trimmed, as a token read
/// with `file()` ends with the file's newline.
fn setting(value: Value<String>, variable: &str) -> Option<String> {
    value
        .as_option()
        .or_else(|| std::env::var(variable).ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

#[async_trait]
impl Provider for SlessProvider {
    type Config<'a> = ProviderConfig;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let mut token = attribute(
            AttributeType::String,
            Optional,
            "A JWT for the sless API (default: $SLESS_API_TOKEN).",
        );
        token.sensitive = true;
        Some(Schema {
            version: 1,
            block: block(
                "Deploys functions, services, triggers and jobs to sless.",
                HashMap::from([
                    (
                        "endpoint".into(),
                        attribute(
                            AttributeType::String,
                            Optional,
                            "Base URL of sless (default: $SLESS_ENDPOINT, else http://127.0.0.1:8080).",
                        ),
                    ),
                    ("token".into(), token),
                    (
                        "namespace".into(),
                        attribute(
                            AttributeType::String,
                            Optional,
                            "Namespace to act on; only for admin tokens (default: the token's own).",
                        ),
                    ),
                    (
                        "nubes_endpoint".into(),
                        attribute(
                            AttributeType::String,
                            Optional,
                            "Accepted for configurations written for the original provider, and not used: sless talks only to endpoint.",
                        ),
                    ),
                ]),
            ),
        })
    }

    async fn configure<'a>(
        &self,
        diags: &mut Diagnostics,
        _terraform_version: String,
        config: Self::Config<'a>,
    ) -> Option<()> {
        // sless talks only to `endpoint`: the original provider's setting is accepted so
        // its configurations apply unchanged, and warned about so nobody relies on it.
        if !config.nubes_endpoint.is_null() {
            diags.warning(
                "nubes_endpoint is not used",
                "sless has no separate API besides endpoint; the setting is accepted so that configurations written for the original provider apply unchanged, and can be removed",
                AttributePath::new("nubes_endpoint"),
            );
        }
        if config.endpoint.is_unknown()
            || config.token.is_unknown()
            || config.namespace.is_unknown()
        {
            // Known at apply: resources then report "not configured" if used before.
            return Some(());
        }
        let endpoint =
            setting(config.endpoint, "SLESS_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            diags.error(
                "invalid endpoint",
                format!("{endpoint:?} is not an http:// or https:// URL"),
                AttributePath::new("endpoint"),
            );
            return Some(());
        }
        let Some(token) = setting(config.token, "SLESS_API_TOKEN") else {
            diags.error(
                "no token",
                "set token in the provider block or SLESS_API_TOKEN (a token comes from `sless token --sub NAME`)",
                AttributePath::new("token"),
            );
            return Some(());
        };
        let client = match config.namespace.as_option() {
            Some(namespace) => Client::for_namespace(&endpoint, &token, &namespace),
            None => Client::new(&endpoint, &token),
        };
        let client = match client {
            Ok(client) => client,
            Err(e) => {
                diags.error("invalid token", e.to_string(), AttributePath::new("token"));
                return Some(());
            }
        };
        // One cheap call tells a wrong endpoint, a refused token or a foreign namespace
        // apart before any resource is touched.
        if let Err(e) = client.list_workloads(Kind::Function).await {
            let (summary, attribute) = match &e {
                ClientError::Unreachable { .. } => ("cannot reach sless", "endpoint"),
                ClientError::Api { status: 401, .. } => ("the token was refused", "token"),
                ClientError::Api { status: 403, .. } => {
                    ("the token may not act on this namespace", "namespace")
                }
                _ => ("sless answered an error", "endpoint"),
            };
            let detail = match e.status() {
                Some(401) => format!("{e}; get a new one with `sless token`"),
                Some(403) => format!(
                    "{e}; namespace {} is not the token's own: a token acts only on the namespace of its sub, unless it is an admin token",
                    client.namespace()
                ),
                _ => e.to_string(),
            };
            diags.error(summary, detail, AttributePath::new(attribute));
            return Some(());
        }
        if let Ok(mut shared) = self.client.write() {
            *shared = Some(client);
        }
        Some(())
    }

    fn get_resources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        Some(HashMap::from([
            (
                "function".to_string(),
                Box::new(WorkloadResource::new(Kind::Function, self.client.clone()))
                    as Box<dyn DynamicResource>,
            ),
            (
                "service".to_string(),
                Box::new(WorkloadResource::new(Kind::Service, self.client.clone())),
            ),
            (
                "trigger".to_string(),
                Box::new(TriggerResource::new(self.client.clone())),
            ),
            (
                "job".to_string(),
                Box::new(JobResource::new(self.client.clone())),
            ),
        ]))
    }

    fn get_data_sources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicDataSource>>> {
        Some(HashMap::from([
            (
                "function".to_string(),
                Box::new(FunctionData::new(self.client.clone())) as Box<dyn DynamicDataSource>,
            ),
            (
                "functions".to_string(),
                Box::new(FunctionsData::new(self.client.clone())),
            ),
        ]))
    }
}
