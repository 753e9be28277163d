//! The console's lifecycle forms read into API requests. Every field goes through the
//! API's own rules (`sless_api::validation`), so a mistake is refused before anything is
//! sent, with the message the API would give, naming the form's field.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sless_api::validation::{self, ValidationError};
use sless_api::{TriggerRequest, WorkloadKind, WorkloadRequest};

/// What the user typed into a form, kept for the page the browser goes back to when the
/// action failed (or, for the invoke form, after every call); env values and the CSRF
/// token are never kept ([`KEPT_NEVER`]).
pub type KeptForm = BTreeMap<String, String>;

/// Fields never shown back: secrets.
pub const KEPT_NEVER: [&str; 3] = ["csrf_token", "env", "env_value"];

/// The longest text field of a lifecycle form the console keeps or sends on.
pub const FIELD_LIMIT: usize = 64 * 1024;

/// Saved test events: how many per function, how large each and how long a name.
pub const SAVED_EVENTS_MAX: usize = 20;
pub const SAVED_EVENT_BYTES: usize = 64 * 1024;
pub const SAVED_EVENT_NAME_LEN: usize = 64;

/// How many next runs the cron preview lists.
pub const PREVIEW_RUNS: usize = 5;

/// An optional number field: empty means "not given".
fn number(field: &str, value: Option<&str>) -> Result<Option<u32>, ValidationError> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ValidationError::new(field, format!("{v:?} is not a whole number"))),
    }
}

fn given(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// `NAME=value` lines (blank lines skipped) into env vars.
pub fn parse_env_lines(
    field: &str,
    text: &str,
) -> Result<BTreeMap<String, String>, ValidationError> {
    let mut env = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = line.split_once('=').ok_or_else(|| {
            ValidationError::new(field, format!("line {} is not NAME=value", n + 1))
        })?;
        env.insert(name.trim().to_string(), value.to_string());
    }
    validation::validate_env(field, &env)?;
    Ok(env)
}

/// The create form (`/funcs/<ns>/new`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CreateForm {
    pub kind: String,
    pub name: String,
    pub runtime: String,
    pub entrypoint: Option<String>,
    pub memory_mb: Option<String>,
    pub timeout_sec: Option<String>,
    /// `NAME=value` lines.
    pub env: Option<String>,
}

impl CreateForm {
    /// The kind and the API's request, or the first field that breaks a rule.
    pub fn request(&self) -> Result<(WorkloadKind, WorkloadRequest), ValidationError> {
        let kind = WorkloadKind::from_name(self.kind.trim()).ok_or_else(|| {
            ValidationError::new(
                "kind",
                format!("{:?}: choose function or service", self.kind),
            )
        })?;
        let name = self.name.trim();
        validation::validate_name("name", name)?;
        let runtime = validation::parse_runtime("runtime", self.runtime.trim())?;
        let entrypoint = given(self.entrypoint.as_deref());
        if let Some(entrypoint) = entrypoint {
            validation::validate_entrypoint("entrypoint", entrypoint)?;
        }
        let memory_mb = number("memory_mb", self.memory_mb.as_deref())?;
        if let Some(memory) = memory_mb {
            validation::validate_memory_mb("memory_mb", memory)?;
        }
        let timeout_sec = number("timeout_sec", self.timeout_sec.as_deref())?;
        if let Some(timeout) = timeout_sec {
            validation::validate_timeout_sec("timeout_sec", timeout)?;
        }
        let env = parse_env_lines("env", self.env.as_deref().unwrap_or(""))?;
        Ok((
            kind,
            WorkloadRequest {
                name: Some(name.to_string()),
                runtime: Some(runtime.as_str().to_string()),
                entrypoint: entrypoint.map(str::to_string),
                memory_mb,
                timeout_sec,
                env_vars: (!env.is_empty()).then_some(env),
                ..WorkloadRequest::default()
            },
        ))
    }
}

/// The fields of a posted form worth showing again: no secrets, each cut to
/// [`FIELD_LIMIT`], at most 32 of them.
pub fn keep(fields: &[(String, String)]) -> KeptForm {
    fields
        .iter()
        .filter(|(name, _)| !KEPT_NEVER.contains(&name.as_str()))
        .take(32)
        .map(|(name, value)| (cut(name), cut(value)))
        .collect()
}

/// A kept field is at most [`FIELD_LIMIT`] bytes (cut on a character boundary).
pub fn cut(value: &str) -> String {
    let mut end = value.len().min(FIELD_LIMIT);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// The settings form: the fields it shows, each left as it is when empty.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SettingsForm {
    pub entrypoint: Option<String>,
    pub memory_mb: Option<String>,
    pub cpu_millis: Option<String>,
    pub disk_mb: Option<String>,
    pub timeout_sec: Option<String>,
    pub min_instances: Option<String>,
    pub max_instances: Option<String>,
    pub target_concurrency: Option<String>,
}

impl SettingsForm {
    /// The workload's spec with the form's changes, as a PUT guarded by the version it
    /// was read at (a change made meanwhile is a 409, not lost).
    pub fn apply(
        &self,
        current: &sless_api::WorkloadResponse,
    ) -> Result<WorkloadRequest, ValidationError> {
        let entrypoint = given(self.entrypoint.as_deref());
        if let Some(entrypoint) = entrypoint {
            validation::validate_entrypoint("entrypoint", entrypoint)?;
        }
        let memory_mb = number("memory_mb", self.memory_mb.as_deref())?;
        if let Some(v) = memory_mb {
            validation::validate_memory_mb("memory_mb", v)?;
        }
        let cpu_millis = number("cpu_millis", self.cpu_millis.as_deref())?;
        if let Some(v) = cpu_millis {
            validation::validate_cpu_millis("cpu_millis", v)?;
        }
        let disk_mb = number("disk_mb", self.disk_mb.as_deref())?;
        if let Some(v) = disk_mb {
            validation::validate_disk_mb("disk_mb", v)?;
        }
        let timeout_sec = number("timeout_sec", self.timeout_sec.as_deref())?;
        if let Some(v) = timeout_sec {
            validation::validate_timeout_sec("timeout_sec", v)?;
        }
        let min_instances = number("min_instances", self.min_instances.as_deref())?;
        let max_instances = number("max_instances", self.max_instances.as_deref())?;
        let target_concurrency = number("target_concurrency", self.target_concurrency.as_deref())?;
        let min_instances = min_instances.unwrap_or(current.min_instances);
        let max_instances = max_instances.unwrap_or(current.max_instances);
        let target_concurrency = target_concurrency.unwrap_or(current.target_concurrency);
        validation::validate_scaling(
            Some(min_instances),
            Some(max_instances),
            Some(target_concurrency),
        )?;
        let mut request = spec_of(current);
        request.min_instances = Some(min_instances);
        request.max_instances = Some(max_instances);
        request.target_concurrency = Some(target_concurrency);
        request.entrypoint = Some(entrypoint.unwrap_or(&current.entrypoint).to_string());
        request.memory_mb = Some(memory_mb.unwrap_or(current.memory_mb));
        request.cpu_millis = Some(cpu_millis.unwrap_or(current.cpu_millis));
        request.disk_mb = Some(disk_mb.unwrap_or(current.disk_mb));
        request.timeout_sec = Some(timeout_sec.unwrap_or(current.timeout_sec));
        Ok(request)
    }
}

/// The whole spec of a workload as a PUT, guarded by its `resource_version`.
pub fn spec_of(current: &sless_api::WorkloadResponse) -> WorkloadRequest {
    WorkloadRequest {
        name: Some(current.name.clone()),
        runtime: Some(current.runtime.clone()),
        entrypoint: Some(current.entrypoint.clone()),
        memory_mb: Some(current.memory_mb),
        cpu_millis: Some(current.cpu_millis),
        disk_mb: Some(current.disk_mb),
        timeout_sec: Some(current.timeout_sec),
        env_vars: Some(current.env_vars.clone()),
        egress: Some(current.egress.clone()),
        min_instances: Some(current.min_instances),
        max_instances: Some(current.max_instances),
        target_concurrency: Some(current.target_concurrency),
        resource_version: Some(current.resource_version.clone()),
    }
}

/// One env change: a value set (added or replaced) or a name removed. Values are never
/// read back: replacing one means typing it again.
#[derive(Clone, Debug, PartialEq)]
pub enum EnvChange {
    Set { name: String, value: String },
    Remove { name: String },
}

impl EnvChange {
    /// The env with the change made, checked as a whole.
    pub fn apply(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ValidationError> {
        let mut env = env.clone();
        match self {
            EnvChange::Set { name, value } => {
                env.insert(name.clone(), value.clone());
            }
            EnvChange::Remove { name } => {
                if env.remove(name).is_none() {
                    return Err(ValidationError::new(
                        "env_name",
                        format!("{name:?} is not set, so there is nothing to remove"),
                    ));
                }
            }
        }
        validation::validate_env("env_name", &env)?;
        Ok(env)
    }
}

/// The add-trigger form.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct TriggerForm {
    pub trigger: String,
    pub trigger_type: String,
    pub schedule: Option<String>,
    pub queue: Option<String>,
    /// Event triggers: messages handled at once (empty: the API's default).
    pub concurrency: Option<String>,
    /// Event triggers: retries before the dead-letter queue (empty: the API's default).
    pub max_retries: Option<String>,
}

impl TriggerForm {
    pub fn request(&self, function: &str) -> Result<TriggerRequest, ValidationError> {
        let name = self.trigger.trim();
        validation::validate_name("trigger", name)?;
        let trigger_type =
            validation::parse_trigger_type("trigger_type", self.trigger_type.trim())?;
        let schedule = given(self.schedule.as_deref());
        let queue = given(self.queue.as_deref());
        match trigger_type {
            sless_api::TriggerType::Http => {}
            sless_api::TriggerType::Cron => {
                let schedule = schedule.ok_or_else(|| {
                    ValidationError::new(
                        "schedule",
                        "a cron trigger needs a schedule, e.g. \"*/5 * * * *\"",
                    )
                })?;
                validation::validate_schedule("schedule", schedule)?;
            }
            sless_api::TriggerType::Event => {
                let queue = queue.ok_or_else(|| {
                    ValidationError::new("queue", "an event trigger needs a queue name")
                })?;
                validation::validate_queue("queue", queue)?;
            }
        }
        let cron = trigger_type == sless_api::TriggerType::Cron;
        let event = trigger_type == sless_api::TriggerType::Event;
        // The event fields are on the form whatever the type: only an event trigger's count.
        let (concurrency, max_retries) = if event {
            (
                number("concurrency", self.concurrency.as_deref())?,
                number("max_retries", self.max_retries.as_deref())?,
            )
        } else {
            (None, None)
        };
        validation::validate_event_options(trigger_type, concurrency, max_retries)?;
        Ok(TriggerRequest {
            name: Some(name.to_string()),
            trigger_type: Some(trigger_type.as_str().to_string()),
            function_ref: Some(function.to_string()),
            schedule: schedule.filter(|_| cron).map(str::to_string),
            queue: queue.filter(|_| event).map(str::to_string),
            enabled: Some(true),
            concurrency,
            max_retries,
            ..TriggerRequest::default()
        })
    }
}

/// The next `count` runs of a cron schedule after `now` (UTC), as RFC 3339; or why the
/// schedule is not one.
pub fn next_runs(
    schedule: &str,
    now: DateTime<Utc>,
    count: usize,
) -> Result<Vec<String>, ValidationError> {
    validation::validate_schedule("schedule", schedule)?;
    let cron: croner::Cron = schedule
        .parse()
        .map_err(|e| ValidationError::new("schedule", format!("{schedule:?}: {e}")))?;
    Ok(cron
        .iter_after(now)
        .take(count)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect())
}

/// A saved event's name: 1–64 of letters, digits, space, `.`, `_` and `-`.
pub fn validate_event_name(value: &str) -> Result<(), ValidationError> {
    let ok = !value.trim().is_empty()
        && value.len() <= SAVED_EVENT_NAME_LEN
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            "event_name",
            format!(
                "{value:?} is not a usable name: 1-{SAVED_EVENT_NAME_LEN} letters, digits, \
                 spaces, '.', '_' or '-'"
            ),
        ))
    }
}

/// A saved event's body: JSON of at most [`SAVED_EVENT_BYTES`].
pub fn validate_event_body(value: &str) -> Result<(), ValidationError> {
    if value.len() > SAVED_EVENT_BYTES {
        return Err(ValidationError::new(
            "body",
            format!(
                "is {} bytes; a saved event holds at most {SAVED_EVENT_BYTES} bytes (64 KiB)",
                value.len()
            ),
        ));
    }
    serde_json::from_str::<serde_json::Value>(value)
        .map(|_| ())
        .map_err(|e| ValidationError::new("body", format!("must be a JSON document: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(fields: &[(&str, &str)]) -> CreateForm {
        let mut form = CreateForm {
            kind: "function".into(),
            name: "hello".into(),
            runtime: "python3.11".into(),
            ..CreateForm::default()
        };
        for (k, v) in fields {
            let v = v.to_string();
            match *k {
                "kind" => form.kind = v,
                "name" => form.name = v,
                "runtime" => form.runtime = v,
                "memory_mb" => form.memory_mb = Some(v),
                "timeout_sec" => form.timeout_sec = Some(v),
                "env" => form.env = Some(v),
                _ => unreachable!(),
            }
        }
        form
    }

    #[test]
    fn create_names_the_field_that_breaks_a_rule() {
        let (kind, request) = create(&[("env", "A=1\n\nB=x=y\n"), ("memory_mb", " 256 ")])
            .request()
            .unwrap();
        assert_eq!(kind, WorkloadKind::Function);
        assert_eq!(request.memory_mb, Some(256));
        let env = request.env_vars.unwrap();
        assert_eq!(env["B"], "x=y");
        for (fields, field) in [
            (vec![("name", "Bad_Name")], "name"),
            (vec![("kind", "job")], "kind"),
            (vec![("runtime", "cobol")], "runtime"),
            (vec![("memory_mb", "lots")], "memory_mb"),
            (vec![("memory_mb", "1")], "memory_mb"),
            (vec![("timeout_sec", "901")], "timeout_sec"),
            (vec![("env", "SLESS_X=1")], "env"),
            (vec![("env", "novalue")], "env"),
        ] {
            let error = create(&fields).request().unwrap_err();
            assert_eq!(error.field, field, "{fields:?}: {error}");
        }
    }

    #[test]
    fn env_changes_set_replace_and_remove_explicitly() {
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let set = EnvChange::Set {
            name: "A".into(),
            value: "2".into(),
        };
        assert_eq!(set.apply(&env).unwrap()["A"], "2");
        let removed = EnvChange::Remove { name: "A".into() }.apply(&env).unwrap();
        assert!(removed.is_empty());
        let missing = EnvChange::Remove { name: "B".into() }.apply(&env);
        assert_eq!(missing.unwrap_err().field, "env_name");
        let bad = EnvChange::Set {
            name: "1A".into(),
            value: String::new(),
        };
        assert_eq!(bad.apply(&env).unwrap_err().field, "env_name");
    }

    #[test]
    fn triggers_need_what_their_type_needs() {
        let form = |t: &str, schedule: Option<&str>| TriggerForm {
            trigger: "t1".into(),
            trigger_type: t.into(),
            schedule: schedule.map(String::from),
            queue: None,
            concurrency: None,
            max_retries: None,
        };
        let cron = form("cron", Some("*/5 * * * *")).request("f").unwrap();
        assert_eq!(cron.schedule.as_deref(), Some("*/5 * * * *"));
        assert_eq!(
            form("cron", None).request("f").unwrap_err().field,
            "schedule"
        );
        assert_eq!(
            form("cron", Some("* *")).request("f").unwrap_err().field,
            "schedule"
        );
        assert_eq!(form("event", None).request("f").unwrap_err().field, "queue");
        assert_eq!(
            form("smtp", None).request("f").unwrap_err().field,
            "trigger_type"
        );
        let http = form("http", Some("ignored")).request("f").unwrap();
        assert_eq!(http.schedule, None);
    }

    #[test]
    fn event_triggers_take_a_queue_concurrency_and_retries_within_range() {
        let form = |concurrency: &str, max_retries: &str| TriggerForm {
            trigger: "orders".into(),
            trigger_type: "event".into(),
            schedule: None,
            queue: Some("orders".into()),
            concurrency: Some(concurrency.into()),
            max_retries: Some(max_retries.into()),
        };
        let event = form("8", "0").request("f").unwrap();
        assert_eq!(event.queue.as_deref(), Some("orders"));
        assert_eq!((event.concurrency, event.max_retries), (Some(8), Some(0)));
        let defaults = form("", " ").request("f").unwrap();
        assert_eq!((defaults.concurrency, defaults.max_retries), (None, None));
        for (concurrency, retries, field) in [
            ("0", "", "concurrency"),
            ("65", "", "concurrency"),
            ("two", "", "concurrency"),
            ("", "101", "max_retries"),
            ("", "-1", "max_retries"),
        ] {
            let error = form(concurrency, retries).request("f").unwrap_err();
            assert_eq!(error.field, field, "{concurrency:?} {retries:?}: {error}");
        }
        let mut amq = form("", "");
        amq.queue = Some("amq.gen".into());
        assert_eq!(amq.request("f").unwrap_err().field, "queue");
        let mut http = form("0", "500");
        http.trigger_type = "http".into();
        let http = http.request("f").unwrap();
        assert_eq!(
            (http.concurrency, http.max_retries),
            (None, None),
            "ignored"
        );
    }

    #[test]
    fn the_preview_lists_the_next_runs_in_order() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T10:07:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let runs = next_runs("*/15 * * * *", now, 3).unwrap();
        assert_eq!(
            runs,
            [
                "2026-01-01T10:15:00Z",
                "2026-01-01T10:30:00Z",
                "2026-01-01T10:45:00Z"
            ]
        );
        assert!(next_runs("nope", now, 3).is_err());
    }

    #[test]
    fn saved_event_names_and_bodies_are_bounded() {
        assert!(validate_event_name("order paid v2").is_ok());
        assert!(validate_event_name("").is_err());
        assert!(validate_event_name("<b>").is_err());
        assert!(validate_event_name(&"a".repeat(65)).is_err());
        assert!(validate_event_body("{\"a\": 1}").is_ok());
        assert!(validate_event_body("{").is_err());
        assert!(validate_event_body(&format!("\"{}\"", "a".repeat(SAVED_EVENT_BYTES))).is_err());
    }
}
