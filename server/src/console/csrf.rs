//! CSRF protection for the console's forms: a random token per session, echoed in a
//! hidden `csrf_token` field and compared on every POST. SameSite=Lax cookies already
//! stop most cross-site posts; the token also covers same-site attackers and old browsers.
//!
//! The login form has no session yet, and showing it must not create one (anonymous
//! visitors would fill the session store): its token is a double-submit cookie
//! instead, scoped to `/login` and compared with the form's field.

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine;
use subtle::ConstantTimeEq;
use tower_sessions::Session;
use tower_sessions::cookie::{Cookie, SameSite};

use super::error::ConsoleError;
use super::session;

const CSRF_KEY: &str = "csrf";

fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A fresh token, at login: one seen before the login is of no use after it.
pub async fn rotate(session: &Session) -> Result<(), ConsoleError> {
    session::set_string(session, CSRF_KEY, &new_token()).await
}

/// The session's token if it has one (pages render without starting a session).
pub async fn existing(session: &Session) -> Option<String> {
    session::get_string(session, CSRF_KEY).await.ok().flatten()
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

const LOGIN_COOKIE: &str = "sless_login_csrf";

/// The login form's token: the browser's own when it has one (several tabs share it),
/// else a new one to be set with [`login_cookie`].
pub fn login_token(headers: &HeaderMap) -> (String, bool) {
    match login_cookie_value(headers) {
        Some(token) => (token, false),
        None => (new_token(), true),
    }
}

/// A login post must carry the token its browser holds in the login cookie: a page of
/// another site can neither read nor set that cookie.
pub fn verify_login(headers: &HeaderMap, submitted: Option<&str>) -> Result<(), ConsoleError> {
    match (login_cookie_value(headers), submitted) {
        (Some(expected), Some(submitted)) if constant_time_eq(&expected, submitted) => Ok(()),
        _ => Err(ConsoleError::Csrf),
    }
}

/// `Set-Cookie` for the login token; `None` removes it (after a login).
pub fn login_cookie(token: Option<&str>, secure: bool) -> Option<HeaderValue> {
    let mut cookie = Cookie::build((LOGIN_COOKIE, token.unwrap_or_default().to_owned()))
        .path("/login")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .build();
    if token.is_none() {
        cookie.make_removal();
    }
    HeaderValue::from_str(&cookie.to_string()).ok()
}

fn login_cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == LOGIN_COOKIE && !c.value().is_empty())
        .map(|c| c.value().to_owned())
}

/// Compares without an early exit, so timing does not reveal a matching prefix.
fn constant_time_eq(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
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
