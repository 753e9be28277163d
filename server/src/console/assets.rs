//! The stylesheets, favicon and enhancement script, compiled into the binary (no CDN,
//! works air-gapped).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const CONSOLE_CSS: &str = include_str!("../../../style/console.css");
const FAVICON_SVG: &str = include_str!("../../../public/favicon.svg");
const CONSOLE_JS: &str = include_str!("../../../public/console.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            // Short: a new binary may ship a new stylesheet under the same name.
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        body,
    )
        .into_response()
}

pub fn router() -> Router {
    Router::new()
        .route(
            "/style/console.css",
            get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }),
        )
        .route(
            "/style/highlight.css",
            get(|| async { asset("text/css; charset=utf-8", app::highlight::theme_css()) }),
        )
        .route(
            "/favicon.svg",
            get(|| async { asset("image/svg+xml", FAVICON_SVG) }),
        )
        .route(
            "/public/favicon.svg",
            get(|| async { asset("image/svg+xml", FAVICON_SVG) }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset("image/svg+xml", FAVICON_SVG) }),
        )
        .route(
            "/public/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
}
