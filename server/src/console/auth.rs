//! Who is calling: a bearer token (curl, no session, no CSRF since no cookie is
//! involved) or a logged-in session. Either way the token is verified again on every
//! request, so an expired token ends the session.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use sless_core::auth::{AuthError, Authenticator, Principal};
use tower_sessions::Session;

use super::ConsoleState;
use super::error::ConsoleError;
use super::session;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Bearer,
    Session,
}

pub struct Caller {
    pub token: String,
    pub principal: Principal,
    pub via: Via,
    /// The request's session (empty for bearer callers without a cookie).
    pub session: Option<Session>,
}

impl Caller {
    /// The owner of `namespace` or an admin; everyone else gets a 403 page.
    pub fn authorize(&self, namespace: &str) -> Result<(), ConsoleError> {
        self.principal.authorize(namespace).map_err(|e| match e {
            AuthError::Forbidden { own_namespace, .. } => ConsoleError::Forbidden(format!(
                "{namespace} belongs to another user; your namespace is {own_namespace}"
            )),
            other => ConsoleError::Forbidden(other.to_string()),
        })
    }

    pub fn badge(&self) -> app::pages::UserBadge {
        app::pages::UserBadge {
            namespace: self.principal.namespace.clone(),
            admin: self.principal.admin,
        }
    }
}

fn auth_error(e: AuthError) -> ConsoleError {
    match e.status() {
        401 => ConsoleError::Unauthorized(e.to_string()),
        403 => ConsoleError::Forbidden(e.to_string()),
        _ => ConsoleError::Internal(e.into()),
    }
}

pub async fn verify(auth: &Authenticator, token: &str) -> Result<Principal, ConsoleError> {
    auth.authenticate(token).await.map_err(auth_error)
}

/// The caller, or None when there is neither a bearer token nor a logged-in session.
pub async fn resolve(state: &ConsoleState, parts: &Parts) -> Result<Option<Caller>, ConsoleError> {
    let session = parts.extensions.get::<Session>().cloned();
    if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
        let token = Authenticator::bearer(value.to_str().ok()).map_err(auth_error)?;
        let principal = verify(&state.auth, token).await?;
        return Ok(Some(Caller {
            token: token.to_string(),
            principal,
            via: Via::Bearer,
            session,
        }));
    }
    let Some(session) = session else {
        return Ok(None);
    };
    let Some(user) = session::user(&session).await? else {
        return Ok(None);
    };
    match verify(&state.auth, &user.token).await {
        Ok(principal) => Ok(Some(Caller {
            token: user.token,
            principal,
            via: Via::Session,
            session: Some(session),
        })),
        Err(ConsoleError::Unauthorized(reason)) => {
            session::expire(&session, &reason).await?;
            Ok(None)
        }
        Err(other) => Err(other),
    }
}

impl FromRequestParts<Arc<ConsoleState>> for Caller {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ConsoleState>,
    ) -> Result<Self, Self::Rejection> {
        resolve(state, parts)
            .await?
            .ok_or(ConsoleError::LoginRequired)
    }
}

/// A post-login target: a console path only (the same rule as the actions' redirects).
pub use app::actions::safe_next;

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_stays_in_the_console() {
        assert!(safe_next("/funcs/sless-abc?kind=service&q=a%20b").is_some());
        assert!(safe_next("/funcs").is_some());
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/funcs//evil",
            "/login",
            "/funcs/x\r\nSet-Cookie: a=b",
            "/funcs/\\evil",
        ] {
            assert!(safe_next(bad).is_none(), "{bad}");
        }
    }
}
