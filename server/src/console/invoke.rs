//! The console's Invoke form calls through the proxy in process: routed, timed and
//! limited like every call, and recorded as the console's (`trigger: console`).

use std::sync::Arc;

use app::console::{InvokeCall, Invoker};
use app::function::INVOKE_BODY_LIMIT;
use axum::body::Body;
use axum::http::{Request, header};
use gateway::proxy::{Caller, Proxy};
use http_body_util::BodyExt;
use sless_client::client::Invocation;

pub struct ProxyInvoker(pub Arc<Proxy>);

#[async_trait::async_trait]
impl Invoker for ProxyInvoker {
    async fn invoke(&self, call: InvokeCall) -> Result<Invocation, String> {
        let mut request = Request::builder()
            .method(call.method)
            .uri(format!("/fn/{}/{}{}", call.namespace, call.name, call.path));
        if call.body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Body::from(call.body.unwrap_or_default()))
            .map_err(|e| format!("cannot make the call: {e}"))?;
        let response = self.0.call(request, Caller::Console).await;
        let (parts, mut body) = response.into_parts();
        // Only what the page shows is read; the rest is left unread.
        let mut shown = Vec::new();
        while shown.len() < INVOKE_BODY_LIMIT {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        shown.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(format!("the answer broke off: {e}")),
                None => break,
            }
        }
        let headers = parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.to_string(), value)
            })
            .collect();
        Ok(Invocation {
            status: parts.status.as_u16(),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            headers,
            body: shown.into(),
        })
    }
}
