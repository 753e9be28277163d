//! The console's pages: Leptos views rendered to HTML strings on the server. There is no
//! client bundle; every action is a plain form and `<details>` expands entries.

mod layout;
mod list;
mod login;
mod message;
mod source;
mod splice;

pub use layout::{Flash, FlashKind, PageContext, UserBadge};
pub use list::{ListPage, render_list};
pub use login::{LoginPage, render_login};
pub use message::render_message;
pub use source::{SourcePage, render_source};
pub use splice::PageBody;

/// `128 MB`, and the timeout as people say it.
fn limits(memory_mb: u32, timeout_sec: u32) -> (String, String) {
    let timeout = if timeout_sec == 0 {
        "no limit".to_string()
    } else {
        format!("{timeout_sec} s")
    };
    (format!("{memory_mb} MB"), timeout)
}

/// `2026-04-20T12:34:56Z` → `2026-04-20 12:34 UTC` (any offset shown in UTC); anything
/// else as given.
fn short_time(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339).map_or_else(
        |_| rfc3339.to_string(),
        |at| {
            at.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        },
    )
}

/// The CSS classes of a phase badge.
fn phase_class(phase: crate::listing::Phase) -> String {
    format!("phase phase-{}", phase.as_str().to_ascii_lowercase())
}

/// The source page of an entry.
pub fn source_href(namespace: &str, kind: crate::listing::WorkloadKind, name: &str) -> String {
    format!(
        "/funcs/{}/source/{}?kind={}",
        crate::listing::url_encode(namespace),
        crate::listing::url_encode(name),
        kind.as_str()
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::highlight::render_file;

    #[test]
    fn times_are_shown_short_in_utc() {
        assert_eq!(short_time("2026-04-20T12:34:56Z"), "2026-04-20 12:34 UTC");
        assert_eq!(
            short_time("2026-04-20T14:34:56.5+02:00"),
            "2026-04-20 12:34 UTC"
        );
        assert_eq!(short_time("yesterday"), "yesterday");
    }
    use crate::listing::{Listing, Selection, WorkloadKind};
    use sless_client::apitypes::{SourceFileResponse, TriggerResponse, WorkloadResponse};

    fn workload(name: &str, kind: WorkloadKind) -> WorkloadResponse {
        WorkloadResponse {
            namespace: "sless-0123456789abcdef".into(),
            name: name.into(),
            kind,
            runtime: "python3.11".into(),
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            timeout_sec: 0,
            env_vars: Default::default(),
            phase: crate::listing::Phase::Failed,
            message: Some("<b>pip</b> said no".into()),
            image_ref: None,
            s3_key: Some(format!("contexts/ns/{name}/1.tar.gz")),
            last_built_at: Some("2026-04-20T12:34:56Z".into()),
            url: Some("http://h/fn/ns/x?a=\"b\"".into()),
            resource_version: "1".into(),
            created_at: "2026-04-20T12:00:00Z".into(),
        }
    }

    fn ctx() -> PageContext {
        PageContext {
            nonce: "n0nce".into(),
            csrf: Some("tok\"en".into()),
            user: Some(UserBadge {
                namespace: "sless-0123456789abcdef".into(),
                admin: false,
            }),
            flash: Some(Flash {
                kind: FlashKind::Error,
                text: "<script>alert(3)</script>".into(),
            }),
        }
    }

    #[test]
    fn list_page_escapes_everything_and_has_forms() {
        let listing = Listing::from_api(
            "sless-0123456789abcdef",
            vec![workload("hello", WorkloadKind::Function)],
            vec![workload("svc", WorkloadKind::Service)],
            vec![TriggerResponse {
                namespace: "sless-0123456789abcdef".into(),
                name: "hello-http".into(),
                trigger_type: "http".into(),
                function_ref: "hello".into(),
                schedule: None,
                queue: None,
                enabled: true,
                active: true,
                url: None,
                last_schedule_time: None,
                message: None,
                resource_version: "1".into(),
                created_at: "x".into(),
                ..Default::default()
            }],
        );
        let selection = Selection::default();
        let entries = selection.apply(&listing);
        let file = SourceFileResponse {
            name: "<img src=x onerror=alert(1)>.py".into(),
            content: Some("</script><script>alert(2)</script>\n".into()),
            binary: false,
            truncated: false,
            size: 36,
        };
        let mut sources = HashMap::new();
        sources.insert("hello".to_string(), Ok(vec![Arc::new(render_file(&file))]));
        let html = render_list(
            &ListPage {
                listing: &listing,
                selection: &selection,
                entries: &entries,
                sources: &sources,
                public_url: "http://127.0.0.1:8080",
            },
            &ctx(),
        )
        .into_string();
        assert!(
            html.starts_with("<!DOCTYPE html><html lang=\"en\">"),
            "{html}"
        );
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;.py"),
            "{html}"
        );
        assert!(!html.contains("<b>pip"), "{html}");
        assert!(!html.contains("style="), "{html}");
        assert!(
            html.contains("<script nonce=\"n0nce\" src=\"/public/console.js\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"csrf_token\" value=\"tok&quot;en\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"trigger\" value=\"hello-http\""),
            "{html}"
        );
        assert!(html.contains("name=\"enabled\" value=\"false\""), "{html}");
        assert!(html.contains("■ Stop"), "{html}");
        assert!(html.contains(">always-on<"), "{html}");
        assert!(html.contains("class=\"hl-"), "{html}");
        println!("{html}");
    }

    #[test]
    fn empty_namespace_shows_how_to_deploy() {
        let listing = Listing::from_api("sless-0123456789abcdef", vec![], vec![], vec![]);
        let selection = Selection::default();
        let html = render_list(
            &ListPage {
                listing: &listing,
                selection: &selection,
                entries: &[],
                sources: &HashMap::new(),
                public_url: "http://127.0.0.1:8080",
            },
            &PageContext::default(),
        )
        .into_string();
        assert!(html.contains("Nothing deployed yet"));
        assert!(html.contains("/v1/namespaces/sless-0123456789abcdef"));
        assert!(html.contains("-F code=@hello.zip"));
    }
}
