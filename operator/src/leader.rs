//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder
//! renews the lease every third of its duration; another replica takes it over only
//! once it has not been renewed for a whole duration. Writes carry the lease's
//! resourceVersion, so two candidates can never both win one round.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::store::{is_already_exists, is_conflict};

pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElection {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Returns once this process holds the lease.
    pub async fn acquire(&self) {
        let mut waiting_logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "leading");
                    return;
                }
                Ok(false) if !waiting_logged => {
                    tracing::info!(lease = %self.name, "another replica leads; standing by");
                    waiting_logged = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "lease not readable"),
            }
            tokio::time::sleep(self.retry_period()).await;
        }
    }

    /// Renews the lease; returns when it was lost (taken over, or not renewable for a
    /// whole lease duration), after which this process must stop reconciling.
    pub async fn hold(&self) -> anyhow::Error {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.retry_period()).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    return anyhow::anyhow!(
                        "lease {} was taken over by another replica",
                        self.name
                    );
                }
                Err(e) if last_renewal.elapsed() >= self.duration => {
                    return anyhow::anyhow!("lease {} could not be renewed ({e})", self.name);
                }
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "renewal failed"),
            }
        }
    }

    /// Gives the lease up when this process holds it, so that a standby takes over at
    /// its next try instead of after a whole lease duration (what client-go's
    /// ReleaseOnCancel does). Called on the way out; errors are only logged.
    pub async fn release(&self) {
        let current = match self.api.get_opt(&self.name).await {
            Ok(Some(current)) => current,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "lease not released");
                return;
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        let lease = Lease {
            metadata: current.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                ..spec
            }),
        };
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "lease released"),
            Err(e) => tracing::warn!(lease = %self.name, error = %e, "lease not released"),
        }
    }

    fn retry_period(&self) -> Duration {
        self.duration / 3
    }

    /// `Ok(true)` when this process holds the lease after the call.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_already_exists(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !mine && !expired(&spec, now) {
            return Ok(false);
        }
        let (acquired, transitions) = match (mine, &spec.acquire_time) {
            (true, Some(time)) => (time.0, spec.lease_transitions.unwrap_or(0)),
            _ => (now, spec.lease_transitions.unwrap_or(0) + 1),
        };
        let lease = Lease {
            metadata: current.metadata.clone(),
            spec: Some(self.spec(acquired, now, transitions)),
        };
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// Free when nobody holds it or its holder stopped renewing for a whole duration.
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let (Some(_), Some(renewed)) = (&spec.holder_identity, &spec.renew_time) else {
        return true;
    };
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(0).into());
    renewed.0 + duration < now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        let renewed = Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago);
        LeaseSpec {
            holder_identity: Some("other".into()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_free_only_after_a_whole_duration_without_renewal() {
        let now = Timestamp::now();
        assert!(!expired(&held(5, 15), now));
        assert!(expired(&held(16, 15), now));
        assert!(expired(&LeaseSpec::default(), now));
    }
}
