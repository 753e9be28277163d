//! The console's view of a namespace: Functions and Services in one list, their
//! triggers, filtering, sorting, counts, and the text/plain and JSON renderings that
//! curl gets on the same URL.

use std::cmp::Ordering;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};
use sless_api::page::{
    Cursor, DEFAULT_PAGE_SIZE, Page, PageQuery, page_after, parse_page_number, take_page,
};
use sless_api::validation::ValidationError;
pub use sless_api::{Phase, WorkloadKind};
use sless_api::{TriggerResponse, WorkloadResponse};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriggerView {
    pub name: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub schedule: Option<String>,
    pub queue: Option<String>,
    pub enabled: bool,
    pub active: bool,
    pub url: Option<String>,
    pub message: Option<String>,
    /// A cron trigger's last fire.
    pub last_run: Option<String>,
    /// Event triggers: "12 delivered, 1 failed, 0 dead-lettered".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<String>,
    #[serde(skip)]
    pub function_ref: String,
}

impl TriggerView {
    pub fn from_api(t: TriggerResponse) -> Self {
        let counters = (t.trigger_type == "event").then(|| {
            format!(
                "{} delivered, {} failed, {} dead-lettered",
                t.delivered, t.failed, t.dead_lettered
            )
        });
        TriggerView {
            name: t.name,
            trigger_type: t.trigger_type,
            schedule: t.schedule,
            queue: t.queue,
            enabled: t.enabled,
            active: t.active,
            url: t.url,
            message: t.message,
            last_run: t.last_schedule_time,
            counters,
            function_ref: t.function_ref,
        }
    }

    /// `http`, `cron(*/5 * * * *)`, `event(orders)`.
    pub fn label(&self) -> String {
        let detail = match self.trigger_type.as_str() {
            "cron" => self.schedule.as_deref(),
            "event" => self.queue.as_deref(),
            _ => None,
        };
        match detail {
            Some(detail) => format!("{}({detail})", self.trigger_type),
            None => self.trigger_type.clone(),
        }
    }

    /// The label with `-off` when stopped: the text listing's TRIGGERS column.
    pub fn text_label(&self) -> String {
        if self.enabled {
            self.label()
        } else {
            format!("{}-off", self.label())
        }
    }
}

/// Stopped: it has http triggers and all of them are stopped, so `/fn` answers 503.
pub fn http_stopped<'a>(triggers: impl IntoIterator<Item = &'a TriggerView>) -> bool {
    let mut http = triggers
        .into_iter()
        .filter(|t| t.trigger_type == "http")
        .peekable();
    http.peek().is_some() && http.all(|t| !t.enabled)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub name: String,
    /// Also the badge (docs/spec.md §9): one word per kind, the same as `sless ls`.
    pub kind: WorkloadKind,
    pub runtime: String,
    pub phase: Phase,
    pub message: Option<String>,
    pub url: Option<String>,
    pub last_built_at: Option<String>,
    pub memory_mb: u32,
    pub timeout_sec: u32,
    /// Instances running now (None where the platform does not count them), and the
    /// scaling's bounds.
    pub instances: Option<u32>,
    pub min_instances: u32,
    pub max_instances: u32,
    /// The latest upload's build context; None before the first upload.
    #[serde(skip)]
    pub s3_key: Option<String>,
    pub triggers: Vec<TriggerView>,
}

impl Entry {
    fn from_api(kind: WorkloadKind, w: WorkloadResponse) -> Self {
        Entry {
            name: w.name,
            kind,
            runtime: w.runtime,
            phase: w.phase,
            message: w.message,
            url: w.url,
            last_built_at: w.last_built_at,
            memory_mb: w.memory_mb,
            timeout_sec: w.timeout_sec,
            instances: w.instances,
            min_instances: w.min_instances,
            max_instances: w.max_instances,
            s3_key: w.s3_key,
            triggers: Vec::new(),
        }
    }

    /// The workload's URL, else its http trigger's.
    pub fn display_url(&self) -> Option<&str> {
        self.url.as_deref().or_else(|| {
            self.triggers
                .iter()
                .find(|t| t.trigger_type == "http")
                .and_then(|t| t.url.as_deref())
        })
    }

    pub fn stopped(&self) -> bool {
        http_stopped(&self.triggers)
    }

    /// `1/0-4`: running / min-max (`-` running where it is not counted); the text
    /// listing's INSTANCES column.
    pub fn instances_text(&self) -> String {
        sless_api::instances_text(self.instances, self.min_instances, self.max_instances)
    }

    pub fn triggers_text(&self) -> String {
        if self.triggers.is_empty() {
            return "-".into();
        }
        self.triggers
            .iter()
            .map(TriggerView::text_label)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Everything the console shows for one namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Listing {
    pub namespace: String,
    pub entries: Vec<Entry>,
    /// Triggers naming a function that does not exist (yet).
    pub orphan_triggers: Vec<TriggerView>,
}

impl Listing {
    pub fn from_api(
        namespace: &str,
        functions: Vec<WorkloadResponse>,
        services: Vec<WorkloadResponse>,
        triggers: Vec<TriggerResponse>,
    ) -> Self {
        let mut entries: Vec<Entry> = functions
            .into_iter()
            .map(|w| Entry::from_api(WorkloadKind::Function, w))
            .chain(
                services
                    .into_iter()
                    .map(|w| Entry::from_api(WorkloadKind::Service, w)),
            )
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut orphan_triggers = Vec::new();
        let mut triggers: Vec<TriggerView> =
            triggers.into_iter().map(TriggerView::from_api).collect();
        triggers.sort_by(|a, b| a.name.cmp(&b.name));
        for trigger in triggers {
            // Functions and Services share one name space, so the name finds the entry.
            match entries.binary_search_by(|e| e.name.as_str().cmp(&trigger.function_ref)) {
                Ok(i) => entries[i].triggers.push(trigger),
                Err(_) => orphan_triggers.push(trigger),
            }
        }
        Listing {
            namespace: namespace.to_string(),
            entries,
            orphan_triggers,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    #[default]
    Name,
    Phase,
    LastBuilt,
}

impl SortKey {
    pub const ALL: [SortKey; 3] = [SortKey::Name, SortKey::Phase, SortKey::LastBuilt];

    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Phase => "phase",
            SortKey::LastBuilt => "last_built",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            SortKey::Name => "Name",
            SortKey::Phase => "Phase",
            SortKey::LastBuilt => "Last built",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        SortKey::ALL
            .into_iter()
            .find(|k| k.as_str() == value.trim().to_ascii_lowercase())
    }
}

/// The phases in the order the console shows them.
pub const PHASES: [Phase; 4] = [Phase::Ready, Phase::Building, Phase::Pending, Phase::Failed];

/// Failures first when sorting by phase: they want attention.
fn phase_rank(phase: Phase) -> usize {
    match phase {
        Phase::Failed => 0,
        Phase::Building => 1,
        Phase::Pending => 2,
        Phase::Ready => 3,
    }
}

/// The query string of `/funcs/<ns>` (a GET form, so it works without script).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The list page's page number, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
    /// The text and JSON listings' page: its length and the last name before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// `table` for the compact view; cards otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<String>,
}

impl ListQuery {
    /// The page asked for; unlike the filters, a bad number is an error naming its
    /// field, as a silently different page would mislead.
    pub fn paging(&self) -> Result<Paging, ValidationError> {
        let page = match self.page.as_deref() {
            Some(value) => parse_page_number(value)?,
            None => 1,
        };
        let cursor = PageQuery {
            limit: self.limit.clone(),
            after: self.after.clone(),
        }
        .cursor()?;
        Ok(Paging { page, cursor })
    }
}

/// Which part of the selected entries an answer holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paging {
    /// The list page's number, from 1 ([`DEFAULT_PAGE_SIZE`] entries a page).
    pub page: usize,
    /// The text and JSON listings' page; None = every entry.
    pub cursor: Option<Cursor>,
}

/// How the list page shows its entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    /// A card per entry with its triggers and source.
    #[default]
    Cards,
    /// One row per entry.
    Table,
}

impl View {
    pub fn as_str(self) -> &'static str {
        match self {
            View::Cards => "cards",
            View::Table => "table",
        }
    }
}

/// Where the list page is among the pages of the selected entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageNav {
    /// From 1; may be past the last page (then the page is empty).
    pub number: usize,
    /// At least 1.
    pub pages: usize,
    pub size: usize,
    /// Entries the selection matches, on every page.
    pub matching: usize,
}

/// Page `number` of the selected entries, [`DEFAULT_PAGE_SIZE`] a page.
pub fn numbered_page(entries: Vec<&Entry>, number: usize) -> (Vec<&Entry>, PageNav) {
    let size = DEFAULT_PAGE_SIZE;
    let nav = PageNav {
        number,
        pages: entries.len().div_ceil(size).max(1),
        size,
        matching: entries.len(),
    };
    let start = (number - 1).saturating_mul(size);
    let page = take_page(entries, start, size, |e: &&Entry| e.name.as_str());
    (page.items, nav)
}

/// The page of the selected entries after the cursor's name. Sorted by name, the
/// cursor needs no entry of that name (one deleted meanwhile still finds its place);
/// in another order it must name an entry of the selection.
pub fn cursor_page<'a>(
    entries: Vec<&'a Entry>,
    cursor: &Cursor,
    sort: SortKey,
) -> Result<Page<&'a Entry>, ValidationError> {
    fn name<'e>(entry: &'e &Entry) -> &'e str {
        &entry.name
    }
    let after = match (&cursor.after, sort) {
        (None, _) => return Ok(take_page(entries, 0, cursor.limit, name)),
        (Some(_), SortKey::Name) => return Ok(page_after(entries, cursor, name)),
        (Some(after), _) => after,
    };
    let start = entries
        .iter()
        .position(|e| &e.name == after)
        .ok_or_else(|| {
            ValidationError::new(
                "after",
                format!(
                    "no entry {after:?} in this listing (sorted by {}, the cursor must name one of its entries)",
                    sort.as_str()
                ),
            )
        })?;
    Ok(take_page(entries, start + 1, cursor.limit, name))
}

/// A parsed [`ListQuery`]: unknown values mean "no filter" rather than an error, so a
/// hand-edited URL still shows something.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub text: String,
    pub kind: Option<WorkloadKind>,
    pub phase: Option<Phase>,
    pub sort: SortKey,
    pub view: View,
}

impl Selection {
    pub fn from_query(query: &ListQuery) -> Self {
        let text = query.q.as_deref().unwrap_or("").trim();
        // Bounded: the filter is echoed into the page and compared with every entry.
        let text: String = text.chars().take(100).collect();
        let phase = query.phase.as_deref().and_then(|p| {
            let p = p.trim();
            PHASES
                .into_iter()
                .find(|known| known.as_str().eq_ignore_ascii_case(p))
        });
        Selection {
            text,
            kind: query.kind.as_deref().and_then(WorkloadKind::parse),
            phase,
            sort: query
                .sort
                .as_deref()
                .and_then(SortKey::parse)
                .unwrap_or_default(),
            view: match query.view.as_deref().map(str::trim) {
                Some(v) if v.eq_ignore_ascii_case("table") => View::Table,
                _ => View::Cards,
            },
        }
    }

    /// The query string that reproduces this selection and view (without `format` or
    /// a page), for links to its pages; empty when nothing is selected.
    pub fn to_query_string(&self) -> String {
        let mut pairs = Vec::new();
        if !self.text.is_empty() {
            pairs.push(("q", self.text.as_str()));
        }
        if let Some(kind) = self.kind {
            pairs.push(("kind", kind.as_str()));
        }
        if let Some(phase) = self.phase {
            pairs.push(("phase", phase.as_str()));
        }
        if self.sort != SortKey::Name {
            pairs.push(("sort", self.sort.as_str()));
        }
        if self.view != View::Cards {
            pairs.push(("view", self.view.as_str()));
        }
        // Selections hold plain strings: encoding them cannot fail.
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }

    pub fn is_filtered(&self) -> bool {
        !self.text.is_empty() || self.kind.is_some() || self.phase.is_some()
    }

    fn matches(&self, entry: &Entry, needle: &str) -> bool {
        self.kind.is_none_or(|k| entry.kind == k)
            && self.phase.is_none_or(|p| entry.phase == p)
            && (needle.is_empty()
                || entry.name.contains(needle)
                || entry.runtime.to_ascii_lowercase().contains(needle))
    }

    /// The entries to show, in order.
    pub fn apply<'a>(&self, listing: &'a Listing) -> Vec<&'a Entry> {
        let needle = self.text.to_lowercase();
        let mut selected: Vec<&Entry> = listing
            .entries
            .iter()
            .filter(|e| self.matches(e, &needle))
            .collect();
        // Entries arrive sorted by name; the sorts below are stable, so name breaks ties.
        match self.sort {
            SortKey::Name => {}
            SortKey::Phase => selected.sort_by_key(|e| phase_rank(e.phase)),
            SortKey::LastBuilt => selected.sort_by(|a, b| newest_first(a, b)),
        }
        selected
    }
}

/// RFC 3339 UTC timestamps compare as strings; never-built entries go last.
fn newest_first(a: &Entry, b: &Entry) -> Ordering {
    match (&a.last_built_at, &b.last_built_at) {
        (Some(x), Some(y)) => y.cmp(x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Query values and path segments: RFC 3986 unreserved characters pass.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub fn url_encode(value: &str) -> String {
    utf8_percent_encode(value, UNRESERVED).to_string()
}

/// Per kind and per phase, over the whole namespace (not the filtered view).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub total: usize,
    pub functions: usize,
    pub services: usize,
    /// Phase → count, only phases that occur, in [`PHASES`] order.
    pub phases: Vec<(Phase, usize)>,
}

impl Counts {
    pub fn of(listing: &Listing) -> Self {
        let functions = listing
            .entries
            .iter()
            .filter(|e| e.kind == WorkloadKind::Function)
            .count();
        let phases = PHASES
            .into_iter()
            .map(|phase| {
                let n = listing.entries.iter().filter(|e| e.phase == phase).count();
                (phase, n)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        Counts {
            total: listing.entries.len(),
            functions,
            services: listing.entries.len() - functions,
            phases,
        }
    }
}

/// The text/plain listing: a header and one line per entry, columns padded to the
/// widest value (the last column is not padded, so lines carry no trailing blanks).
pub fn render_text(entries: &[&Entry]) -> String {
    let rows: Vec<[String; 7]> = entries
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.kind.to_string(),
                e.runtime.clone(),
                e.phase.to_string(),
                e.triggers_text(),
                e.instances_text(),
                e.display_url().unwrap_or("-").to_string(),
            ]
        })
        .collect();
    let mut widths = sless_api::LIST_COLUMNS.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::with_capacity((rows.len() + 1) * (widths.iter().sum::<usize>() + 12));
    let mut push_row = |cells: [&str; 7]| {
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    };
    push_row(sless_api::LIST_COLUMNS);
    for row in &rows {
        push_row([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6],
        ]);
    }
    out
}

/// The JSON answer of `/funcs/<ns>?format=json`.
#[derive(Serialize)]
pub struct JsonListing<'a> {
    pub namespace: &'a str,
    pub counts: Counts,
    pub entries: Vec<&'a Entry>,
    pub orphan_triggers: &'a [TriggerView],
    /// The `after` of the next page, when a page was asked for and more are left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

pub fn render_json(listing: &Listing, entries: Vec<&Entry>, next: Option<String>) -> String {
    let body = JsonListing {
        namespace: &listing.namespace,
        counts: Counts::of(listing),
        entries,
        orphan_triggers: &listing.orphan_triggers,
        next,
    };
    // Plain data of strings and numbers: serialisation cannot fail.
    serde_json::to_string_pretty(&body).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn workload(name: &str, phase: Phase, built: Option<&str>) -> WorkloadResponse {
        WorkloadResponse {
            namespace: "ns".into(),
            name: name.into(),
            kind: WorkloadKind::Function,
            runtime: "python3.11".into(),
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            cpu_millis: 1000,
            disk_mb: 512,
            timeout_sec: 30,
            env_vars: Default::default(),
            egress: Default::default(),
            min_instances: 0,
            max_instances: 4,
            target_concurrency: 8,
            instances: Some(0),
            phase,
            message: None,
            image_ref: None,
            s3_key: None,
            version: None,
            last_built_at: built.map(String::from),
            url: None,
            resource_version: "1".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    pub(crate) fn trigger(
        name: &str,
        function: &str,
        kind: &str,
        enabled: bool,
    ) -> TriggerResponse {
        TriggerResponse {
            namespace: "ns".into(),
            name: name.into(),
            trigger_type: kind.into(),
            function_ref: function.into(),
            schedule: (kind == "cron").then(|| "*/5 * * * *".into()),
            queue: None,
            enabled,
            active: enabled,
            url: (kind == "http").then(|| format!("http://h/fn/ns/{function}")),
            last_schedule_time: None,
            message: None,
            resource_version: "1".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            ..Default::default()
        }
    }

    fn sample() -> Listing {
        Listing::from_api(
            "ns",
            vec![
                workload("beta", Phase::Ready, Some("2026-01-02T00:00:00Z")),
                workload("alpha", Phase::Failed, None),
            ],
            vec![workload(
                "gamma-svc",
                Phase::Building,
                Some("2026-01-03T00:00:00Z"),
            )],
            vec![
                trigger("beta-http", "beta", "http", true),
                trigger("beta-cron", "beta", "cron", false),
                trigger("lost", "nobody", "http", true),
            ],
        )
    }

    #[test]
    fn event_triggers_show_their_queue_and_counters() {
        let mut api = trigger("orders", "f", "event", true);
        api.queue = Some("orders-q".into());
        api.delivered = 12;
        api.failed = 1;
        let view = TriggerView::from_api(api);
        assert_eq!(view.label(), "event(orders-q)");
        assert_eq!(
            view.counters.as_deref(),
            Some("12 delivered, 1 failed, 0 dead-lettered")
        );
        assert_eq!(
            TriggerView::from_api(trigger("h", "f", "http", true)).counters,
            None
        );
    }

    #[test]
    fn text_listing_is_aligned_with_a_header() {
        let listing = sample();
        let text = render_text(&Selection::default().apply(&listing));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("NAME       KIND      RUNTIME     PHASE     TRIGGERS"));
        let url_col = lines[0].find("URL").unwrap();
        for line in &lines[1..] {
            assert!(!line.ends_with(' '));
            assert_eq!(line.as_bytes()[url_col - 1], b' ', "{line}");
            assert_ne!(line.as_bytes()[url_col], b' ', "{line}");
        }
        assert!(lines[2].starts_with("beta       function"), "{}", lines[2]);
        assert!(
            lines[2].contains("cron(*/5 * * * *)-off,http  0/0-4      http://h/fn/ns/beta"),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("gamma-svc  service"));
        assert!(lines[1].contains(" -  "), "{}", lines[1]);
    }

    #[test]
    fn filters_and_sorts() {
        let listing = sample();
        let names = |s: Selection| -> Vec<String> {
            s.apply(&listing).iter().map(|e| e.name.clone()).collect()
        };
        let query = |q: &str| {
            let query: ListQuery = serde_json::from_value(serde_json::json!({"sort": q})).unwrap();
            Selection::from_query(&query)
        };
        assert_eq!(names(query("phase")), ["alpha", "gamma-svc", "beta"]);
        assert_eq!(names(query("last_built")), ["gamma-svc", "beta", "alpha"]);
        let services = Selection {
            kind: Some(WorkloadKind::Service),
            ..Default::default()
        };
        assert_eq!(names(services), ["gamma-svc"]);
        let text = Selection {
            text: "ALP".into(),
            ..Default::default()
        };
        assert_eq!(names(text), ["alpha"]);
        assert_eq!(listing.orphan_triggers.len(), 1);
        let counts = Counts::of(&listing);
        assert_eq!((counts.functions, counts.services), (2, 1));
        assert_eq!(counts.phases[0], (Phase::Ready, 1));
    }

    #[test]
    fn selection_round_trips_through_a_query_string() {
        let query = ListQuery {
            q: Some("a b&c".into()),
            kind: Some("service".into()),
            phase: Some("failed".into()),
            sort: Some("phase".into()),
            view: Some("table".into()),
            ..ListQuery::default()
        };
        let selection = Selection::from_query(&query);
        assert_eq!(selection.phase, Some(Phase::Failed));
        assert_eq!(
            selection.to_query_string(),
            "q=a+b%26c&kind=service&phase=Failed&sort=phase&view=table"
        );
        assert_eq!(Selection::default().to_query_string(), "");
    }

    #[test]
    fn the_kind_filter_takes_the_kind_words_only() {
        let kind = |value: &str| {
            let query = ListQuery {
                kind: Some(value.into()),
                ..ListQuery::default()
            };
            Selection::from_query(&query).kind
        };
        assert_eq!(kind("Functions"), Some(WorkloadKind::Function));
        assert_eq!(kind("service"), Some(WorkloadKind::Service));
        // Jobs are their own kind: "job" is not a Function.
        assert_eq!(kind("job"), None);
        assert_eq!(kind("always-on"), None);
    }

    /// `n` functions `f000`..: every third Failed, the others Ready.
    fn many(n: usize) -> Listing {
        let functions = (0..n)
            .map(|i| {
                let phase = if i % 3 == 0 {
                    Phase::Failed
                } else {
                    Phase::Ready
                };
                workload(&format!("f{i:03}"), phase, None)
            })
            .collect();
        Listing::from_api("ns", functions, vec![], vec![])
    }

    fn page_names(entries: &[&Entry]) -> Vec<String> {
        entries.iter().map(|e| e.name.clone()).collect()
    }

    fn paging(pairs: serde_json::Value) -> Result<Paging, ValidationError> {
        serde_json::from_value::<ListQuery>(pairs).unwrap().paging()
    }

    #[test]
    fn numbered_pages_cover_the_selection_and_count_it_whole() {
        let empty = Listing::default();
        let (entries, nav) = numbered_page(Selection::default().apply(&empty), 1);
        assert!(entries.is_empty());
        assert_eq!((nav.pages, nav.matching), (1, 0));

        // An exact multiple: two full pages, no empty third.
        let hundred = many(100);
        let all = Selection::default().apply(&hundred);
        let (first, nav) = numbered_page(all.clone(), 1);
        assert_eq!((first.len(), nav.pages, nav.matching), (50, 2, 100));
        let (last, _) = numbered_page(all.clone(), 2);
        assert_eq!(page_names(&last)[..2], ["f050", "f051"]);
        assert_eq!(last.len(), 50);
        let (past, nav) = numbered_page(all, 3);
        assert!(past.is_empty());
        assert_eq!(nav.number, 3);

        // Filter + page: pages of what matches (34 Failed of 101), counts unchanged.
        let listing = many(101);
        let failed = Selection {
            phase: Some(Phase::Failed),
            ..Default::default()
        };
        let (page, nav) = numbered_page(failed.apply(&listing), 1);
        assert_eq!((page.len(), nav.pages, nav.matching), (34, 1, 34));
        assert_eq!(page_names(&page)[..2], ["f000", "f003"]);
        assert_eq!(Counts::of(&listing).total, 101);
        let (last, nav) = numbered_page(Selection::default().apply(&listing), 3);
        assert_eq!(
            (page_names(&last), nav.pages),
            (vec!["f100".to_string()], 3)
        );
    }

    #[test]
    fn cursor_pages_follow_the_sort_and_end_without_a_next() {
        let listing = many(7);
        let cursor = |limit, after: Option<&str>| Cursor {
            limit,
            after: after.map(String::from),
        };
        let by_name = Selection::default();
        let page = cursor_page(by_name.apply(&listing), &cursor(3, None), SortKey::Name).unwrap();
        assert_eq!(page_names(&page.items), ["f000", "f001", "f002"]);
        assert_eq!(page.next.as_deref(), Some("f002"));
        let last = cursor_page(
            by_name.apply(&listing),
            &cursor(3, Some("f005")),
            SortKey::Name,
        )
        .unwrap();
        assert_eq!(
            (page_names(&last.items), last.next),
            (vec!["f006".into()], None)
        );
        let past = cursor_page(
            by_name.apply(&listing),
            &cursor(3, Some("zzz")),
            SortKey::Name,
        )
        .unwrap();
        assert!(past.items.is_empty() && past.next.is_none());

        // Sorted by phase (Failed first): f000 f003 f006 f001 f002 f004 f005.
        let by_phase = Selection {
            sort: SortKey::Phase,
            ..Default::default()
        };
        let page = cursor_page(
            by_phase.apply(&listing),
            &cursor(2, Some("f006")),
            SortKey::Phase,
        )
        .unwrap();
        assert_eq!(page_names(&page.items), ["f001", "f002"]);
        assert_eq!(page.next.as_deref(), Some("f002"));
        let gone = cursor_page(
            by_phase.apply(&listing),
            &cursor(2, Some("f999")),
            SortKey::Phase,
        )
        .unwrap_err();
        assert_eq!(gone.field, "after");
    }

    #[test]
    fn bad_page_values_name_their_field() {
        use serde_json::json;
        assert_eq!(paging(json!({"page": "x"})).unwrap_err().field, "page");
        assert_eq!(paging(json!({"page": "0"})).unwrap_err().field, "page");
        assert_eq!(paging(json!({"limit": "0"})).unwrap_err().field, "limit");
        assert_eq!(paging(json!({"limit": "1001"})).unwrap_err().field, "limit");
        let ok = paging(json!({"page": "4", "limit": "10", "after": "b"})).unwrap();
        assert_eq!(ok.page, 4);
        assert_eq!(ok.cursor.unwrap().limit, 10);
        assert_eq!(paging(json!({})).unwrap().cursor, None);
    }
}
