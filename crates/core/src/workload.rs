//! Functions and Services as both runners see them: whether one must run and whether
//! `/fn` may reach it, from its triggers. The embedded runner, the Kubernetes controller
//! and the Kubernetes route table all follow this one rule, and say "no code yet" alike.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{Kind, TriggerSpec, TriggerType};
use crate::routes::{Instances, Route};

/// What a workload's triggers ask of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// An instance must run: a Service always, a Function while a trigger of it is enabled.
    pub needed: bool,
    /// `/fn` may call it (a Service, or a Function with an enabled http trigger), or why not.
    pub exposed: Result<(), String>,
    /// An enabled event or cron trigger calls it through the proxy, whether `/fn` may or
    /// not.
    pub dispatched: bool,
    /// It has a URL to show: a Service, or a Function with an http trigger, started or not.
    pub has_url: bool,
}

/// The demand on the Function or Service `name` of `kind`, given triggers as
/// `(name, spec)`; those of other functions are skipped, a Service has none.
pub fn demand<'a>(
    kind: Kind,
    name: &str,
    triggers: impl IntoIterator<Item = (&'a str, &'a TriggerSpec)>,
) -> Demand {
    if kind == Kind::Service {
        return Demand {
            needed: true,
            exposed: Ok(()),
            dispatched: false,
            has_url: true,
        };
    }
    let mine: Vec<(&str, &TriggerSpec)> = triggers
        .into_iter()
        .filter(|(_, t)| t.function_ref == name)
        .collect();
    let enabled = |of: TriggerType| mine.iter().any(|(_, t)| t.trigger_type == of && t.enabled);
    let first_http = mine
        .iter()
        .find(|(_, t)| t.trigger_type == TriggerType::Http);
    let exposed = match first_http {
        _ if enabled(TriggerType::Http) => Ok(()),
        Some((stopped, _)) => Err(trigger_stopped(stopped, name)),
        None => Err(no_http_trigger(name)),
    };
    Demand {
        needed: mine.iter().any(|(_, t)| t.enabled),
        exposed,
        dispatched: enabled(TriggerType::Event) || enabled(TriggerType::Cron),
        has_url: first_http.is_some(),
    }
}

impl Demand {
    /// The route of a workload whose instances answer at `instances`: callers of `/fn`
    /// reach it only if it is exposed, its event and cron triggers whenever they run.
    pub fn ready_route(
        &self,
        kind: Kind,
        instances: impl Into<Instances>,
        timeout: Option<Duration>,
        version: Option<Arc<str>>,
    ) -> Route {
        let instances = instances.into();
        match &self.exposed {
            Ok(()) => Route::Ready {
                kind,
                instances,
                timeout,
                version,
            },
            Err(reason) if self.dispatched => Route::Hidden {
                reason: reason.clone(),
                kind,
                instances,
                timeout,
                version,
            },
            Err(reason) => Route::Unavailable {
                reason: reason.clone(),
            },
        }
    }
}

/// Why a workload or a self-contained job cannot run yet, and what to do about it.
pub fn no_code(kind: Kind, name: &str) -> String {
    match kind {
        Kind::FunctionJob => format!("no code yet: upload a zip to .../jobs/{name}/upload"),
        _ => format!(
            "{} {name:?} has no code yet; upload a zip to .../{name}/upload",
            kind.noun()
        ),
    }
}

/// How a refused upload's status message starts.
const REFUSED_UPLOAD: &str = "the last upload was refused: ";

/// The status message of a workload whose last upload the code review refused
/// (docs/spec.md §4); `refusal` is the API's error, reason included.
pub fn refused_upload(refusal: &str) -> String {
    format!("{REFUSED_UPLOAD}{refusal}; fix the code and upload again")
}

/// True for a [`refused_upload`] message: a runner keeps it on a workload with no code
/// rather than replacing it with [`no_code`], so the reason stays visible in both modes.
pub fn is_refused_upload(message: &str) -> bool {
    message.starts_with(REFUSED_UPLOAD)
}

/// Why `/fn` cannot call a function whose http trigger is stopped. Callers are often
/// anonymous: how to start it belongs to the console and the CLI, not this answer.
fn trigger_stopped(trigger: &str, function: &str) -> String {
    format!("the http trigger {trigger:?} of function {function:?} is stopped")
}

/// Why `/fn` cannot call a function that has no http trigger.
fn no_http_trigger(function: &str) -> String {
    format!("function {function:?} has no http trigger, so it cannot be called here")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::Address;

    fn trigger(trigger_type: TriggerType, function_ref: &str, enabled: bool) -> TriggerSpec {
        TriggerSpec {
            trigger_type,
            function_ref: function_ref.into(),
            schedule: None,
            queue: None,
            enabled,
            concurrency: None,
            max_retries: None,
        }
    }

    fn of<'a>(triggers: &'a [(&'a str, TriggerSpec)]) -> Demand {
        demand(Kind::Function, "f", triggers.iter().map(|(n, t)| (*n, t)))
    }

    #[test]
    fn a_service_runs_and_is_exposed_whatever_its_triggers() {
        let stray = [("t", trigger(TriggerType::Http, "s", false))];
        let service = demand(Kind::Service, "s", stray.iter().map(|(n, t)| (*n, t)));
        assert!(service.needed && service.exposed.is_ok() && service.has_url);
        assert!(!service.dispatched);
    }

    #[test]
    fn a_function_without_triggers_is_idle_and_unreachable() {
        let idle = of(&[("other", trigger(TriggerType::Http, "g", true))]);
        assert!(!idle.needed && !idle.has_url && !idle.dispatched);
        assert_eq!(idle.exposed, Err(no_http_trigger("f")));
    }

    #[test]
    fn a_stopped_http_trigger_keeps_the_url_and_says_so() {
        let stopped = of(&[("web", trigger(TriggerType::Http, "f", false))]);
        assert!(!stopped.needed && stopped.has_url);
        assert_eq!(stopped.exposed, Err(trigger_stopped("web", "f")));
    }

    #[test]
    fn any_enabled_trigger_runs_it_only_http_exposes_it() {
        let cron = of(&[("tick", trigger(TriggerType::Cron, "f", true))]);
        assert!(cron.needed && cron.exposed.is_err() && cron.dispatched);
        let idle = of(&[("web", trigger(TriggerType::Http, "f", false))]);
        assert!(matches!(
            idle.ready_route(
                Kind::Function,
                Address::Tcp("127.0.0.1:1".into()),
                None,
                None
            ),
            Route::Unavailable { .. }
        ));
        let event = of(&[
            ("web", trigger(TriggerType::Http, "f", false)),
            ("queue", trigger(TriggerType::Event, "f", true)),
        ]);
        assert!(event.needed && event.dispatched);
        let address = Address::Tcp("127.0.0.1:1".into());
        assert!(matches!(
            event.ready_route(Kind::Function, address.clone(), None, None),
            Route::Hidden { .. }
        ));
        assert!(matches!(
            cron.ready_route(Kind::Function, address.clone(), None, None),
            Route::Hidden { .. }
        ));
        let web = of(&[("web", trigger(TriggerType::Http, "f", true))]);
        assert!(web.needed && web.exposed.is_ok());
        assert!(matches!(
            web.ready_route(Kind::Function, address, None, None),
            Route::Ready { .. }
        ));
    }
}
