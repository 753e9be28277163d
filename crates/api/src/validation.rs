//! The rules of scalar fields, as the API, the CLI and the Terraform provider check
//! them; every message names the field and the rule.

use std::collections::BTreeMap;
use std::fmt;

use crate::{Runtime, TriggerType};

pub const MEMORY_MB_MIN: u32 = 64;
pub const MEMORY_MB_MAX: u32 = 4096;
pub const MEMORY_MB_RANGE: std::ops::RangeInclusive<u32> = MEMORY_MB_MIN..=MEMORY_MB_MAX;
/// CPU in thousandths of a core: 50 (5 %) to 16 cores.
pub const CPU_MILLIS_MIN: u32 = 50;
pub const CPU_MILLIS_MAX: u32 = 16_000;
/// Scratch space (HOME/TMPDIR): 16 MiB to 64 GiB.
pub const DISK_MB_MIN: u32 = 16;
pub const DISK_MB_MAX: u32 = 65_536;
pub const MAX_TIMEOUT_SEC: u32 = 900;
pub const MAX_REPLICAS: i32 = 100;
/// Instances one Function or Service may run at once (`min_instances`, `max_instances`).
pub const MAX_INSTANCES: u32 = 100;
/// Calls in flight per instance before another is started (`target_concurrency`).
pub const MAX_TARGET_CONCURRENCY: u32 = 1000;
pub const MAX_NAME_LEN: usize = 63;
pub const MAX_EVENT_CONCURRENCY: u32 = 64;
pub const MAX_EVENT_RETRIES: u32 = 100;
/// AMQP caps queue names at 255 bytes; sless adds `.retry.<delay>` (at most 5 min) /
/// `.dead` to the queue's.
pub const MAX_QUEUE_LEN: usize = 255 - ".retry.300s".len();

// The same rules as the CRD schemas state them (RE2 patterns and CEL), so `kubectl
// apply` of an invalid resource is refused by the API server itself.
/// A DNS-1123 label ([`validate_name`]).
pub const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// `module.function` ([`validate_entrypoint`]).
pub const ENTRYPOINT_PATTERN: &str =
    "^[A-Za-z0-9_-]+([./][A-Za-z0-9_-]+)*\\.[A-Za-z_][A-Za-z0-9_]*$";
/// Five whitespace-separated fields; the API server cannot parse cron itself.
pub const SCHEDULE_PATTERN: &str = "^\\s*\\S+(\\s+\\S+){4}\\s*$";

/// A rule a field broke; the message names the field and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    pub field: String,
    pub rule: String,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl std::error::Error for ValidationError {}

type Result<T = ()> = std::result::Result<T, ValidationError>;

/// DNS-1123 label: lowercase alphanumerics and '-', 1–63 chars, alphanumeric at both ends.
pub fn validate_name(field: &str, value: &str) -> Result {
    let rule = || {
        ValidationError::new(
            field,
            format!(
                "{value:?} is not a valid name: use 1-63 lowercase letters, digits and '-', \
                 starting and ending with a letter or digit (DNS-1123 label)"
            ),
        )
    };
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && alnum(&bytes[0])
        && alnum(&bytes[bytes.len() - 1]);
    if ok { Ok(()) } else { Err(rule()) }
}

pub fn parse_runtime(field: &str, value: &str) -> Result<Runtime> {
    Runtime::ALL
        .into_iter()
        .find(|r| r.as_str() == value)
        .ok_or_else(|| {
            let supported: Vec<_> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
            ValidationError::new(
                field,
                format!(
                    "unsupported runtime {value:?}; supported: {}",
                    supported.join(", ")
                ),
            )
        })
}

pub fn parse_trigger_type(field: &str, value: &str) -> Result<TriggerType> {
    [TriggerType::Http, TriggerType::Cron, TriggerType::Event]
        .into_iter()
        .find(|t| t.as_str() == value)
        .ok_or_else(|| {
            ValidationError::new(
                field,
                format!("unknown trigger type {value:?}; use one of: http, cron, event"),
            )
        })
}

/// `module.function`: the module may be dotted or a path (`pkg.mod`, `src/app`),
/// the function an identifier.
pub fn validate_entrypoint(field: &str, value: &str) -> Result {
    let ident = |s: &str| {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let ok = match value.rsplit_once('.') {
        Some((module, function)) => {
            ident(function)
                && !module.starts_with('/')
                && module.split(['.', '/']).all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                })
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!("{value:?} must have the form module.function, e.g. handler.handle"),
        ))
    }
}

pub fn validate_memory_mb(field: &str, value: u32) -> Result {
    if MEMORY_MB_RANGE.contains(&value) {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!(
                "{value} is out of range: must be between {} and {} (MiB)",
                MEMORY_MB_RANGE.start(),
                MEMORY_MB_RANGE.end()
            ),
        ))
    }
}

pub fn validate_cpu_millis(field: &str, value: u32) -> Result {
    in_range(
        field,
        value,
        CPU_MILLIS_MIN,
        CPU_MILLIS_MAX,
        "thousandths of a core; 1000 = one core",
    )
}

pub fn validate_disk_mb(field: &str, value: u32) -> Result {
    in_range(
        field,
        value,
        DISK_MB_MIN,
        DISK_MB_MAX,
        "MiB of scratch space",
    )
}

fn in_range(field: &str, value: u32, min: u32, max: u32, unit: &str) -> Result {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!("{value} is out of range: must be between {min} and {max} ({unit})"),
        ))
    }
}

/// The scaling fields as given (unset ones take defaults that are in range): each in
/// range, and the least no more than the most.
pub fn validate_scaling(
    min_instances: Option<u32>,
    max_instances: Option<u32>,
    target_concurrency: Option<u32>,
) -> Result {
    if let Some(min) = min_instances {
        in_range(
            "min_instances",
            min,
            0,
            MAX_INSTANCES,
            "instances kept running; 0 lets it scale to zero",
        )?;
    }
    if let Some(max) = max_instances {
        in_range(
            "max_instances",
            max,
            1,
            MAX_INSTANCES,
            "instances started at most",
        )?;
    }
    if let Some(target) = target_concurrency {
        in_range(
            "target_concurrency",
            target,
            1,
            MAX_TARGET_CONCURRENCY,
            "calls in flight per instance before another is started",
        )?;
    }
    if let (Some(min), Some(max)) = (min_instances, max_instances)
        && min > max
    {
        return Err(ValidationError::new(
            "min_instances",
            format!(
                "{min} is more than max_instances ({max}): raise max_instances or lower min_instances"
            ),
        ));
    }
    Ok(())
}

pub fn validate_timeout_sec(field: &str, value: u32) -> Result {
    if value <= MAX_TIMEOUT_SEC {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!("{value} is out of range: use 0 for no limit or 1-{MAX_TIMEOUT_SEC} seconds"),
        ))
    }
}

/// All env names and values of one object together: far below Linux's 128 KiB per string
/// (MAX_ARG_STRLEN), so a stored object can always start, and small enough that objects
/// stay cheap to list.
pub const MAX_ENV_BYTES: usize = 64 * 1024;

/// Env names must be valid shell names and must not shadow what the platform sets.
pub fn validate_env(field: &str, env: &BTreeMap<String, String>) -> Result {
    let total: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ENV_BYTES {
        return Err(ValidationError::new(
            field,
            format!(
                "the names and values total {total} bytes, more than the limit of \
                 {MAX_ENV_BYTES} bytes (64 KiB); pass large settings by reference, e.g. an \
                 object key or a URL"
            ),
        ));
    }
    for (name, value) in env {
        // The process environment is NUL-terminated strings: such a value cannot start.
        if value.contains('\0') {
            return Err(ValidationError::new(
                field,
                format!(
                    "the value of {name:?} contains a NUL byte, which no environment variable can hold"
                ),
            ));
        }
        let mut chars = name.chars();
        let valid = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(ValidationError::new(
                field,
                format!(
                    "{name:?} is not a valid environment variable name: use letters, digits \
                     and '_', not starting with a digit"
                ),
            ));
        }
        if name == "PORT" || name.starts_with("SLESS_") {
            return Err(ValidationError::new(
                field,
                format!("{name:?} is reserved by the platform (PORT and SLESS_* are set by sless)"),
            ));
        }
    }
    Ok(())
}

/// A standard 5-field cron expression (minute hour day-of-month month day-of-week).
pub fn validate_schedule(field: &str, value: &str) -> Result {
    let fields = value.split_whitespace().count();
    if fields != 5 {
        return Err(ValidationError::new(
            field,
            format!(
                "{value:?} has {fields} fields; a schedule is a 5-field cron expression \
                 (minute hour day-of-month month day-of-week), e.g. \"*/5 * * * *\""
            ),
        ));
    }
    value.parse::<croner::Cron>().map(|_| ()).map_err(|e| {
        ValidationError::new(
            field,
            format!("{value:?} is not a valid cron expression: {e}"),
        )
    })
}

/// The event reaches a job in one environment variable (`SLESS_EVENT_JSON`); Linux caps
/// one such string, name included, at 128 KiB (MAX_ARG_STRLEN), past which the job
/// cannot start (E2BIG).
pub const MAX_EVENT_JSON_BYTES: usize = 128 * 1024 - 64;

pub fn validate_event_json(field: &str, value: &str) -> Result {
    if value.len() > MAX_EVENT_JSON_BYTES {
        return Err(ValidationError::new(
            field,
            format!(
                "is {} bytes, more than the limit of {MAX_EVENT_JSON_BYTES} bytes (the event \
                 travels in an environment variable); pass large inputs by reference, e.g. an \
                 object key",
                value.len()
            ),
        ));
    }
    serde_json::from_str::<serde_json::Value>(value)
        .map(|_| ())
        .map_err(|e| ValidationError::new(field, format!("must be a JSON document: {e}")))
}

/// An AMQP queue name sless may consume and declare `<queue>.retry.<delay>` /
/// `<queue>.dead` for.
pub fn validate_queue(field: &str, value: &str) -> Result {
    let rule = |why: &str| ValidationError::new(field, format!("{value:?} {why}"));
    if value.len() > MAX_QUEUE_LEN {
        return Err(rule(&format!(
            "is too long: at most {MAX_QUEUE_LEN} bytes (sless adds \".retry.<delay>\" and \".dead\")"
        )));
    }
    if value.starts_with("amq.") {
        return Err(rule(
            "is reserved: queue names starting with \"amq.\" belong to the broker",
        ));
    }
    if value.trim() != value || value.chars().any(char::is_control) {
        return Err(rule(
            "is not a usable queue name: no spaces around it, no control characters",
        ));
    }
    Ok(())
}

/// `concurrency` and `max_retries`: given only for event triggers, and within range.
pub fn validate_event_options(
    trigger_type: TriggerType,
    concurrency: Option<u32>,
    max_retries: Option<u32>,
) -> Result {
    if trigger_type != TriggerType::Event {
        let event_only = [
            ("concurrency", concurrency.is_some()),
            ("max_retries", max_retries.is_some()),
        ];
        return match event_only.iter().find(|(_, given)| *given) {
            Some((field, _)) => Err(ValidationError::new(
                *field,
                "applies to event triggers only",
            )),
            None => Ok(()),
        };
    }
    if let Some(concurrency) = concurrency
        && !(1..=MAX_EVENT_CONCURRENCY).contains(&concurrency)
    {
        return Err(ValidationError::new(
            "concurrency",
            format!(
                "{concurrency} is out of range: messages handled at once, \
                 1 to {MAX_EVENT_CONCURRENCY}"
            ),
        ));
    }
    match max_retries {
        Some(retries) if retries > MAX_EVENT_RETRIES => Err(ValidationError::new(
            "max_retries",
            format!(
                "{retries} is out of range: retries of a failed message before \
                 it goes to the dead-letter queue, 0 to {MAX_EVENT_RETRIES}"
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dns_1123() {
        for ok in ["a", "hello", "a-b-1", "0abc", &"a".repeat(63)] {
            assert!(validate_name("name", ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            let err = validate_name("name", bad).unwrap_err();
            assert_eq!(err.field, "name");
            assert!(err.to_string().contains("DNS-1123"), "{err}");
        }
    }

    #[test]
    fn runtimes_parse_and_unknown_lists_supported() {
        assert_eq!(parse_runtime("runtime", "go1.23").unwrap(), Runtime::Go123);
        let err = parse_runtime("runtime", "ruby3").unwrap_err();
        assert!(err.to_string().contains("python3.11, nodejs20, go1.23"));
    }

    #[test]
    fn limits() {
        assert!(validate_memory_mb("memory_mb", 63).is_err());
        assert!(validate_memory_mb("memory_mb", 64).is_ok());
        assert!(validate_memory_mb("memory_mb", 4096).is_ok());
        assert!(validate_memory_mb("memory_mb", 4097).is_err());
        assert!(validate_cpu_millis("cpu_millis", 49).is_err());
        assert!(validate_cpu_millis("cpu_millis", 50).is_ok());
        assert!(validate_cpu_millis("cpu_millis", 16_000).is_ok());
        let err = validate_cpu_millis("cpu_millis", 16_001).unwrap_err();
        assert!(err.to_string().contains("between 50 and 16000"), "{err}");
        assert!(validate_disk_mb("disk_mb", 15).is_err());
        assert!(validate_disk_mb("disk_mb", 16).is_ok());
        assert!(validate_disk_mb("disk_mb", 65_536).is_ok());
        assert!(validate_disk_mb("disk_mb", 65_537).is_err());
        assert!(validate_timeout_sec("timeout_sec", 0).is_ok());
        assert!(validate_timeout_sec("timeout_sec", 900).is_ok());
        let err = validate_timeout_sec("timeout_sec", 901).unwrap_err();
        assert!(err.to_string().starts_with("timeout_sec: 901"));
    }

    #[test]
    fn env_total_size() {
        let at_limit = BTreeMap::from([("A".to_string(), "v".repeat(MAX_ENV_BYTES - 1))]);
        assert!(validate_env("env_vars", &at_limit).is_ok());
        let over = BTreeMap::from([("A".to_string(), "v".repeat(MAX_ENV_BYTES))]);
        let message = validate_env("env_vars", &over).unwrap_err().to_string();
        assert!(message.contains("65537 bytes"), "{message}");
        assert!(message.contains("limit of 65536 bytes"), "{message}");
        // Many small values add up.
        let many: BTreeMap<String, String> = (0..100)
            .map(|i| (format!("V{i}"), "x".repeat(1000)))
            .collect();
        assert!(validate_env("env_vars", &many).is_err());
    }

    #[test]
    fn env_names() {
        let env = |k: &str| BTreeMap::from([(k.to_string(), "v".to_string())]);
        assert!(validate_env("env_vars", &env("DB_URL")).is_ok());
        assert!(validate_env("env_vars", &env("_x1")).is_ok());
        let nul = BTreeMap::from([("A".to_string(), "a\0b".to_string())]);
        assert!(
            validate_env("env_vars", &nul)
                .unwrap_err()
                .rule
                .contains("NUL")
        );
        for bad in ["1A", "A-B", "", "A B", "PORT", "SLESS_MODE"] {
            assert!(validate_env("env_vars", &env(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn schedules_are_five_field_cron() {
        assert!(validate_schedule("schedule", "*/5 * * * *").is_ok());
        assert!(validate_schedule("schedule", "0 3 * * 1-5").is_ok());
        assert!(validate_schedule("schedule", "* * * * * *").is_err());
        assert!(validate_schedule("schedule", "@hourly").is_err());
        assert!(validate_schedule("schedule", "61 * * * *").is_err());
    }

    #[test]
    fn entrypoints() {
        for ok in ["handler.handle", "pkg.mod.run", "src/app.main", "h._x"] {
            assert!(validate_entrypoint("entrypoint", ok).is_ok(), "{ok}");
        }
        for bad in [
            "handler", ".handle", "handler.", "/abs.h", "a..b", "h.1x", "h.a-b",
        ] {
            assert!(validate_entrypoint("entrypoint", bad).is_err(), "{bad}");
        }
    }
}
