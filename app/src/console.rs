//! The console's server-side actions: everything goes through the REST API with the
//! user's own token (so the API's authorization is the console's), plus the source cache.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use sless_client::apitypes::{TriggerResponse, WorkloadResponse};
use sless_client::client::{Client, ClientError, Collection};

use crate::highlight::render_file;
use crate::listing::{Entry, Listing, WorkloadKind};
use crate::source_cache::{RenderedSource, SourceCache};

/// Why a view could not be built: the API refused or failed, or highlighting did.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error("highlighting failed: {0}")]
    Highlight(String),
}

impl ViewError {
    /// The status to answer with: the API's own for API errors, 502 when it is unreachable.
    pub fn status(&self) -> u16 {
        match self {
            ViewError::Api(ClientError::Api { status, .. }) => *status,
            ViewError::Api(ClientError::Unreachable { .. } | ClientError::Decode { .. }) => 502,
            ViewError::Api(ClientError::Config(_)) | ViewError::Highlight(_) => 500,
        }
    }
}

pub type Result<T, E = ViewError> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct ConsoleOptions {
    /// The REST API the console acts through (in `sless up`: its own address).
    pub api_endpoint: String,
    /// The list page inlines the highlighted source of this many entries (the first ones
    /// shown); the rest link to their source page, so 1,000 entries cost 1,000 rows, not
    /// 1,000 source fetches.
    pub inline_sources: usize,
    /// Uploads larger than this (bytes of source, all files) are not inlined: their
    /// highlighted HTML is ~25× the source, and a list page should stay light.
    pub inline_source_bytes: u64,
    /// Cap of the highlighted-source cache, in bytes.
    pub source_cache_bytes: usize,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            api_endpoint: "http://127.0.0.1:8080".into(),
            inline_sources: 20,
            inline_source_bytes: 32 * 1024,
            source_cache_bytes: 64 * 1024 * 1024,
        }
    }
}

pub struct Console {
    options: ConsoleOptions,
    cache: SourceCache,
}

impl Console {
    pub fn new(options: ConsoleOptions) -> Self {
        crate::highlight::warm_up();
        Console {
            cache: SourceCache::new(options.source_cache_bytes),
            options,
        }
    }

    pub fn options(&self) -> &ConsoleOptions {
        &self.options
    }

    pub fn cache(&self) -> &SourceCache {
        &self.cache
    }

    /// A client acting as the caller on `namespace`.
    pub fn client(&self, token: &str, namespace: &str) -> Result<Client> {
        Ok(Client::for_namespace(
            &self.options.api_endpoint,
            token,
            namespace,
        )?)
    }

    /// Functions, Services and Triggers, fetched concurrently.
    pub async fn listing(&self, client: &Client) -> Result<Listing> {
        let (functions, services, triggers) = tokio::try_join!(
            client.list_workloads(Collection::Functions),
            client.list_workloads(Collection::Services),
            client.list_triggers(),
        )?;
        Ok(Listing::from_api(
            client.namespace(),
            functions,
            services,
            triggers,
        ))
    }

    pub async fn workload(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<WorkloadResponse> {
        Ok(client.get_workload(kind.collection(), name).await?)
    }

    /// The highlighted files of the upload behind `s3_key`: from the cache, else fetched
    /// from the API's source endpoint and highlighted off the async runtime.
    pub async fn source(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        s3_key: &str,
    ) -> Result<RenderedSource> {
        if let Some(files) = self.cache.get_upload(s3_key) {
            return Ok(files);
        }
        let listed = client.source(kind.collection(), name).await?;
        self.highlight(s3_key, listed).await
    }

    /// Highlights the files of an upload not yet cached (off the async runtime) and
    /// caches them.
    async fn highlight(
        &self,
        s3_key: &str,
        listed: Vec<sless_client::apitypes::SourceFileResponse>,
    ) -> Result<RenderedSource> {
        let mut files: Vec<Option<Arc<crate::highlight::RenderedFile>>> = listed
            .iter()
            .map(|f| self.cache.get(s3_key, &f.name))
            .collect();
        let missing: Vec<(usize, sless_client::apitypes::SourceFileResponse)> = listed
            .into_iter()
            .enumerate()
            .filter(|(i, _)| files[*i].is_none())
            .collect();
        if !missing.is_empty() {
            let rendered = tokio::task::spawn_blocking(move || {
                missing
                    .into_iter()
                    .map(|(i, f)| (i, Arc::new(render_file(&f))))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| ViewError::Highlight(e.to_string()))?;
            for (i, file) in rendered {
                files[i] = Some(file);
            }
        }
        let files: RenderedSource = files.into_iter().flatten().collect();
        self.cache.put_upload(s3_key, &files);
        Ok(files)
    }

    /// Sources of the first [`ConsoleOptions::inline_sources`] entries that have code,
    /// by entry name; a failure is kept per entry so one broken upload does not blank
    /// the page. Uploads over [`ConsoleOptions::inline_source_bytes`] are left out (the
    /// page links to them) and not highlighted here.
    pub async fn inline_sources(
        &self,
        client: &Client,
        entries: &[&Entry],
    ) -> HashMap<String, Result<RenderedSource, String>> {
        let wanted: Vec<(String, WorkloadKind, String)> = entries
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.kind, e.s3_key.clone()?)))
            .take(self.options.inline_sources)
            .collect();
        futures::stream::iter(wanted)
            .map(|(name, kind, key)| async move {
                let result = self.small_source(client, kind, &name, &key).await;
                result
                    .map_err(|e| e.to_string())
                    .transpose()
                    .map(|result| (name, result))
            })
            .buffer_unordered(8)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    /// The highlighted upload if it is small enough to inline; `None` if it is not.
    async fn small_source(
        &self,
        client: &Client,
        kind: WorkloadKind,
        name: &str,
        s3_key: &str,
    ) -> Result<Option<RenderedSource>> {
        let limit = self.options.inline_source_bytes;
        if let Some(files) = self.cache.get_upload(s3_key) {
            let size: u64 = files.iter().map(|f| f.size).sum();
            return Ok((size <= limit).then_some(files));
        }
        let listed = client.source(kind.collection(), name).await?;
        if listed.iter().map(|f| f.size).sum::<u64>() > limit {
            return Ok(None);
        }
        self.highlight(s3_key, listed).await.map(Some)
    }

    /// Starts (`enabled`) or stops a trigger in place.
    pub async fn set_trigger(
        &self,
        client: &Client,
        trigger: &str,
        enabled: bool,
    ) -> Result<TriggerResponse> {
        Ok(client.set_trigger_enabled(trigger, enabled).await?)
    }
}
