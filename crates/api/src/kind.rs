//! The resource kinds: one enum, and the views of it the store, the API and people use.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The four resource kinds; the store, the API and the client dispatch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Function,
    Trigger,
    FunctionJob,
    Service,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Function,
        Kind::Trigger,
        Kind::FunctionJob,
        Kind::Service,
    ];

    /// The CustomResource kind, also the store's key.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Function => "Function",
            Kind::Trigger => "Trigger",
            Kind::FunctionJob => "FunctionJob",
            Kind::Service => "Service",
        }
    }

    /// Lowercase word for messages ("function \"x\" not found").
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Function => "function",
            Kind::Trigger => "trigger",
            Kind::FunctionJob => "job",
            Kind::Service => "service",
        }
    }

    /// The API collection under `/v1/namespaces/{ns}/`.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Trigger => "triggers",
            Kind::FunctionJob => "jobs",
            Kind::Service => "services",
        }
    }

    /// Functions and Services share one name space: both are reachable at
    /// `/fn/<ns>/<name>` and become workloads of that name.
    pub fn shares_names_with(self) -> Option<Kind> {
        match self {
            Kind::Function => Some(Kind::Service),
            Kind::Service => Some(Kind::Function),
            Kind::Trigger | Kind::FunctionJob => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Functions and Services, the kinds `/fn` reaches and the console lists: `"function"` /
/// `"service"` (their [`Kind::noun`]) in JSON and in the console's `kind=` query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    Function,
    Service,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 2] = [WorkloadKind::Function, WorkloadKind::Service];

    pub fn as_str(self) -> &'static str {
        Kind::from(self).noun()
    }

    /// Exactly its name in JSON, as in the console's paths.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Lenient, for people: any case, plurals too. "job" is not a Function: jobs are
    /// their own kind.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|k| value == k.as_str() || value == Kind::from(*k).path())
    }
}

impl From<WorkloadKind> for Kind {
    fn from(kind: WorkloadKind) -> Self {
        match kind {
            WorkloadKind::Function => Kind::Function,
            WorkloadKind::Service => Kind::Service,
        }
    }
}

impl TryFrom<Kind> for WorkloadKind {
    /// The kind that is not a workload.
    type Error = Kind;

    fn try_from(kind: Kind) -> Result<Self, Kind> {
        match kind {
            Kind::Function => Ok(WorkloadKind::Function),
            Kind::Service => Ok(WorkloadKind::Service),
            other => Err(other),
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_kinds_are_the_function_and_service_kinds() {
        for kind in Kind::ALL {
            match WorkloadKind::try_from(kind) {
                Ok(workload) => {
                    assert_eq!(Kind::from(workload), kind);
                    assert_eq!(workload.as_str(), kind.noun());
                    assert_eq!(WorkloadKind::parse(kind.path()), Some(workload));
                }
                Err(other) => assert_eq!(other, kind),
            }
        }
        assert_eq!(
            WorkloadKind::parse(" Functions "),
            Some(WorkloadKind::Function)
        );
        assert_eq!(WorkloadKind::parse("job"), None);
        assert_eq!(
            WorkloadKind::from_name("service"),
            Some(WorkloadKind::Service)
        );
        assert_eq!(WorkloadKind::from_name("Service"), None);
    }

    #[test]
    fn serde_names_stay() {
        let json = serde_json::to_string(&[WorkloadKind::Function, WorkloadKind::Service]);
        assert_eq!(json.unwrap(), r#"["function","service"]"#);
        let json = serde_json::to_string(&Kind::FunctionJob).unwrap();
        assert_eq!(json, r#""FunctionJob""#);
    }
}
