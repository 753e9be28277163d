//! The console's pages: Leptos components rendered to HTML on the server. There is no
//! client bundle; every action is an `<ActionForm>` (a plain form post) and `<details>`
//! expands entries.

mod create;
mod diff;
mod function;
mod jobs;
mod layout;
mod list;
mod login;
mod message;
mod namespaces;
mod parts;
mod source;
mod splice;

pub use create::{CreatePage, render_create};
pub use diff::{DiffPage, render_diff};
pub use function::{FunctionPage, render_function};
pub use jobs::{job_text, jobs_text, render_job, render_jobs};
pub use layout::{Flash, FlashKind, PageContext, UserBadge};
pub use list::{ListPage, render_list};
pub use login::{LoginPage, render_login};
pub use message::render_message;
pub use namespaces::render_namespaces;
pub use parts::{KindBadge, PhaseBadge, Time, TriggerItem, TriggerToggle, Warmth, WorkloadUrl};
pub use source::{SourcePage, render_source};
pub use splice::PageBody;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::highlight::render_file;
    use crate::setup::init_executor;

    use crate::listing::{Listing, Selection, WorkloadKind, numbered_page};
    use sless_api::{SourceFileResponse, TriggerResponse, WorkloadResponse};

    fn workload(name: &str, kind: WorkloadKind) -> WorkloadResponse {
        WorkloadResponse {
            namespace: "sless-0123456789abcdef".into(),
            name: name.into(),
            kind,
            runtime: "python3.11".into(),
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            cpu_millis: 250,
            disk_mb: 1024,
            timeout_sec: 0,
            env_vars: Default::default(),
            egress: Default::default(),
            min_instances: 0,
            max_instances: 4,
            target_concurrency: 8,
            instances: Some(0),
            phase: crate::listing::Phase::Failed,
            message: Some("<b>pip</b> said no".into()),
            image_ref: None,
            s3_key: Some(format!("contexts/ns/{name}/1.tar.gz")),
            version: Some("1".into()),
            last_built_at: Some("2026-04-20T12:34:56Z".into()),
            url: Some("http://h/fn/ns/x?a=\"b\"".into()),
            resource_version: "1".into(),
            created_at: "2026-04-20T12:00:00Z".into(),
        }
    }

    /// `hello-http`, the http trigger of `hello`.
    fn http_trigger(enabled: bool) -> TriggerResponse {
        TriggerResponse {
            namespace: "sless-0123456789abcdef".into(),
            name: "hello-http".into(),
            trigger_type: "http".into(),
            function_ref: "hello".into(),
            schedule: None,
            queue: None,
            enabled,
            active: enabled,
            url: None,
            last_schedule_time: None,
            message: None,
            resource_version: "1".into(),
            created_at: "x".into(),
            ..Default::default()
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
            flash: Some(Flash::error("<script>alert(3)</script>")),
            refresh: None,
        }
    }

    #[tokio::test]
    async fn list_page_escapes_everything_and_has_forms() {
        init_executor();
        let listing = Listing::from_api(
            "sless-0123456789abcdef",
            vec![workload("hello", WorkloadKind::Function)],
            vec![workload("svc", WorkloadKind::Service)],
            vec![http_trigger(true)],
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
                nav: numbered_page(entries.clone(), 1).1,
                sources: &sources,
                public_url: "http://127.0.0.1:8080",
            },
            &ctx(),
        )
        .await
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
        assert!(html.contains(">service<"), "{html}");
        assert!(html.contains("action=\"/console/set-trigger\""), "{html}");
        assert!(html.contains("class=\"hl-"), "{html}");
        println!("{html}");
    }

    /// The list page of `selection` over 120 functions, page `number`.
    async fn page_of_many(selection: &Selection, number: usize) -> String {
        let functions = (0..120)
            .map(|i| workload(&format!("f{i:03}"), WorkloadKind::Function))
            .collect();
        let listing = Listing::from_api("sless-0123456789abcdef", functions, vec![], vec![]);
        let (entries, nav) = numbered_page(selection.apply(&listing), number);
        render_list(
            &ListPage {
                listing: &listing,
                selection,
                entries: &entries,
                nav,
                sources: &HashMap::new(),
                public_url: "http://127.0.0.1:8080",
            },
            &PageContext::default(),
        )
        .await
        .into_string()
    }

    #[tokio::test]
    async fn a_long_list_pages_with_links_that_keep_the_selection() {
        init_executor();
        let table = Selection {
            text: "f0".into(),
            view: crate::listing::View::Table,
            ..Default::default()
        };
        // f000..f099 match "f0": two pages of 50.
        let html = page_of_many(&table, 2).await;
        assert!(html.contains("<table class=\"entries-table\""), "{html}");
        assert_eq!(html.matches("<tr id=\"entry-").count(), 50, "{html}");
        assert!(html.contains("id=\"entry-f050\"") && html.contains("id=\"entry-f099\""));
        assert!(!html.contains("id=\"entry-f100\""), "{html}");
        assert!(
            html.contains("Showing 51–100 of 100 matching (120 in all)."),
            "{html}"
        );
        assert!(html.contains("Page 2 of 2"), "{html}");
        assert!(
            html.contains(
                "href=\"/funcs/sless-0123456789abcdef?q=f0&amp;view=table\" rel=\"prev\""
            ),
            "{html}"
        );
        assert!(!html.contains("rel=\"next\""), "{html}");
        // The filter form keeps the view; the counts stay the namespace's.
        assert!(html.contains("name=\"view\" value=\"table\""), "{html}");
        assert!(html.contains("120 functions"), "{html}");

        let cards = page_of_many(&Selection::default(), 1).await;
        assert_eq!(cards.matches(" class=\"entry\"").count(), 50, "{cards}");
        assert!(cards.contains("Showing 1–50 of 120 entries."), "{cards}");
        assert!(
            cards.contains("href=\"/funcs/sless-0123456789abcdef?page=2\" rel=\"next\""),
            "{cards}"
        );
        assert!(
            cards.contains("href=\"/funcs/sless-0123456789abcdef?page=3\" rel=\"last\""),
            "{cards}"
        );
        assert!(
            cards.contains("href=\"/funcs/sless-0123456789abcdef?view=table\""),
            "{cards}"
        );

        let past = page_of_many(&Selection::default(), 9).await;
        assert!(past.contains("Page 9 is past the last page (3)."), "{past}");
        assert!(past.contains("?page=3\" rel=\"prev\""), "{past}");
    }

    #[tokio::test]
    async fn empty_namespace_shows_how_to_deploy() {
        init_executor();
        let listing = Listing::from_api("sless-0123456789abcdef", vec![], vec![], vec![]);
        let selection = Selection::default();
        let html = render_list(
            &ListPage {
                listing: &listing,
                selection: &selection,
                entries: &[],
                nav: numbered_page(Vec::new(), 1).1,
                sources: &HashMap::new(),
                public_url: "http://127.0.0.1:8080",
            },
            &PageContext::default(),
        )
        .await
        .into_string();
        assert!(html.contains("Nothing deployed yet"));
        assert!(html.contains("/v1/namespaces/sless-0123456789abcdef"));
        assert!(html.contains("-F code=@hello.zip"));
    }

    #[tokio::test]
    async fn a_failed_function_page_leads_with_its_error_and_escapes_everything() {
        init_executor();
        let mut failed = workload("hello", WorkloadKind::Function);
        failed.message = Some("step\nERROR: no <b>pkg</b>\nmore".into());
        failed.phase = crate::listing::Phase::Building;
        let stopped = http_trigger(false);
        let view = crate::function::FunctionView {
            workload: failed,
            triggers: vec![crate::function::TriggerRuns::of(
                crate::listing::TriggerView::from_api(stopped),
                chrono::Utc::now(),
            )],
            calls: crate::function::CallSummary::default(),
            logs: vec![sless_api::LogLineResponse {
                time: "t".into(),
                stream: "stdout".into(),
                version: "1".into(),
                request_id: Some("call-7".into()),
                line: "<script>alert(4)</script>".into(),
            }],
            build_log: Some("ERROR: no <b>pkg</b>".into()),
            versions: Vec::new(),
        };
        let logs = sless_client::client::LogFilter::tail(200);
        let page = |follow| FunctionPage {
            namespace: "sless-0123456789abcdef",
            view: &view,
            follow,
            invocation: None,
            logs: &logs,
            events: &[],
            loaded_event: None,
            confirm_delete: false,
            cron_preview: None,
            max_upload_mb: 50,
        };
        let html = render_function(&page(true), &ctx()).await.into_string();
        assert!(
            html.contains("<meta http-equiv=\"refresh\" content=\"3\">"),
            "{html}"
        );
        assert!(html.contains("<title>hello · sless</title>"), "{html}");
        assert!(
            html.contains("<dt>CPU</dt><dd>0.25 cores</dd>")
                && html.contains("<dt>Disk</dt><dd>1024 MB</dd>"),
            "the limits are shown: {html}"
        );
        assert!(
            !html.contains("<script>alert(4)") && !html.contains("<b>pkg"),
            "{html}"
        );
        assert!(html.contains("class=\"url url-stopped\""), "{html}");
        let quiet = render_function(&page(false), &ctx()).await.into_string();
        assert!(!quiet.contains("http-equiv"), "no refresh unless followed");

        let mut view = view.clone();
        view.workload.phase = crate::listing::Phase::Failed;
        let page = FunctionPage {
            namespace: "sless-0123456789abcdef",
            view: &view,
            follow: true,
            invocation: None,
            logs: &logs,
            events: &[],
            loaded_event: None,
            confirm_delete: false,
            cron_preview: None,
            max_upload_mb: 50,
        };
        let html = render_function(&page, &ctx()).await.into_string();
        let error = html.find("class=\"error-line\"").expect("the error line");
        assert!(
            error < html.find("id=\"calls\"").unwrap(),
            "before everything else"
        );
        assert!(
            html.contains("<details open class=\"build-log\">"),
            "{html}"
        );
        assert!(
            !html.contains("http-equiv"),
            "nothing to follow once failed"
        );
    }
}
