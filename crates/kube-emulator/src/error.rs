//! Kubernetes `Status` failures.

use std::fmt;

use serde_json::{Value, json};

/// A failed request, rendered as a Kubernetes `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: json!({}),
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", group_resource(group, plural)),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub(crate) fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                group_resource(group, plural)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub(crate) fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                group_resource(group, plural)
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 422 with one cause per field error, worded like the API server's.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: &[FieldError]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let listed: Vec<String> = causes.iter().map(ToString::to_string).collect();
        let joined = if listed.len() == 1 {
            listed[0].clone()
        } else {
            format!("[{}]", listed.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.detail, "field": c.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {joined}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub(crate) fn service_unavailable() -> Self {
        Self::new(
            503,
            "ServiceUnavailable",
            "the API server is down (an outage the test made)",
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    pub(crate) fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The `Status` object the API server sends.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        })
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `pods` for the core group, `functions.sless.dev` otherwise.
pub(crate) fn group_resource(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// One field's validation failure, `field: detail` in messages.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FieldError {
    pub field: String,
    pub reason: &'static str,
    pub detail: String,
}

impl FieldError {
    pub(crate) fn new(field: &str, reason: &'static str, detail: String) -> Self {
        Self {
            field: field.to_string(),
            reason,
            detail,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}
