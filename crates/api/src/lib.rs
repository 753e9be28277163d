//! sless API types: the REST API's JSON types and enums (`Phase`, `JobPhase`,
//! `WorkloadKind`, `Collection`), the runtimes and their descriptors (`runtime/`), the
//! naming rule of namespaces and the units people read.
//! Plain serde types with no HTTP client, Kubernetes, database or S3 dependency (as
//! `kube-core` is to `kube-client`): the typed client, the console, the CLI, the
//! Terraform provider and the server's model all build on these.

mod naming;
pub mod runtime;
mod types;
mod units;
pub mod validation;

pub use naming::namespace_for_sub;
pub use runtime::{Runtime, RuntimeDescriptor};
pub use types::*;
pub use units::human_bytes;
