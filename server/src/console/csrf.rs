//! CSRF protection for the console's forms: a random token per session, echoed in a
//! hidden `csrf_token` field and compared on every POST. SameSite=Lax cookies already
//! stop most cross-site posts; the token also covers same-site attackers and old browsers.

use base64::Engine;
use tower_sessions::Session;

use super::error::ConsoleError;
use super::session::{self, CSRF_KEY};

pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The session's token, created (and the session started) on first use.
pub async fn token(session: &Session) -> Result<String, ConsoleError> {
    if let Some(token) = session::get_string(session, CSRF_KEY).await? {
        return Ok(token);
    }
    let token = new_token();
    session::set_string(session, CSRF_KEY, &token).await?;
    Ok(token)
}

/// The token exists only once a session exists, so a post without one fails too.
pub async fn verify(session: &Session, submitted: Option<&str>) -> Result<(), ConsoleError> {
    let expected = session::get_string(session, CSRF_KEY).await?;
    match (expected, submitted) {
        (Some(expected), Some(submitted)) if constant_time_eq(&expected, submitted) => Ok(()),
        _ => Err(ConsoleError::Csrf),
    }
}

/// Compares without an early exit, so timing does not reveal a matching prefix.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_compared_exactly() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(constant_time_eq(&a, &a.clone()));
        assert!(!constant_time_eq(&a, &b));
        assert!(!constant_time_eq(&a, &a[..42]));
    }
}
