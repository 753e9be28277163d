//! What makes a call to `/fn` one of sless's own cron fires in Kubernetes mode, where
//! the CronJob's pod calls the data plane over the network: a token per tenant
//! namespace, an HMAC of the install's key, which the controllers put in a Secret of
//! the tenant's deploy namespace (mounted by the cron pods only) and the data plane
//! checks. A header alone proves nothing from the internet; a leaked token can forge
//! cron records of its own tenant only.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Request header carrying the token; never passed on to the function.
pub const TRIGGER_TOKEN_HEADER: &str = "x-sless-trigger-token";

/// Shorter keys are refused: the key is all that stands between a caller and a forged
/// cron record.
const MIN_KEY_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
#[error(
    "the trigger key must be at least {MIN_KEY_BYTES} bytes (it is {0}); \
     make one with: head -c 32 /dev/urandom | base64"
)]
pub struct TriggerKeyError(usize);

/// The install's secret key for trigger tokens.
#[derive(Clone)]
pub struct TriggerKey(Vec<u8>);

impl std::fmt::Debug for TriggerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TriggerKey(..)")
    }
}

impl TriggerKey {
    pub fn new(secret: &str) -> Result<Self, TriggerKeyError> {
        let secret = secret.trim();
        if secret.len() < MIN_KEY_BYTES {
            return Err(TriggerKeyError(secret.len()));
        }
        Ok(Self(secret.as_bytes().to_vec()))
    }

    /// A key of random bytes, for a process that is both sides (tests).
    pub fn random() -> Self {
        Self(rand::random::<[u8; 32]>().to_vec())
    }

    fn mac(&self, namespace: &str) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(b"sless cron trigger\0");
        mac.update(namespace.as_bytes());
        mac
    }

    /// The token of the cron triggers of user namespace `namespace` (hex).
    pub fn token(&self, namespace: &str) -> String {
        hex::encode(self.mac(namespace).finalize().into_bytes())
    }

    /// Whether `token` is that of `namespace` (compared in constant time).
    pub fn verifies(&self, namespace: &str, token: &[u8]) -> bool {
        let Ok(token) = hex::decode(token) else {
            return false;
        };
        self.mac(namespace).verify_slice(&token).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_for_its_namespace_and_key_only() {
        let key = TriggerKey::new("0123456789abcdef0123").unwrap();
        let token = key.token("sless-a");
        assert!(key.verifies("sless-a", token.as_bytes()));
        assert!(!key.verifies("sless-b", token.as_bytes()));
        let other = TriggerKey::new("fedcba9876543210fedc").unwrap();
        assert!(!other.verifies("sless-a", token.as_bytes()));
        assert!(!key.verifies("sless-a", b"not hex"));
        assert!(!key.verifies("sless-a", b""));
    }

    #[test]
    fn a_short_key_is_refused() {
        let error = TriggerKey::new("short").unwrap_err().to_string();
        assert!(error.contains("at least 16 bytes"), "{error}");
    }
}
