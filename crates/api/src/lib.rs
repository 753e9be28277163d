//! sless API types: the REST API's JSON types and enums (`Kind` and its `WorkloadKind`
//! subset, `Phase`, `JobPhase`), the runtimes and their descriptors (`runtime/`), the
//! naming rule of namespaces, the object keys of uploads, and the units and text cuts
//! people read.
//! Plain serde types with no HTTP client, Kubernetes, database or S3 dependency (as
//! `kube-core` is to `kube-client`): the typed client, the console, the CLI, the
//! Terraform provider and the server's model all build on these.

mod egress;
pub mod keys;
mod kind;
mod listing;
mod naming;
pub mod page;
mod request_id;
pub mod runtime;
pub mod text;
mod types;
mod units;
pub mod validation;

pub use egress::{Egress, EgressRule, MAX_EGRESS_ENTRIES, MAX_EGRESS_ENTRY_LEN};
pub use kind::{Kind, WorkloadKind};
pub use listing::{LIST_COLUMNS, instances_text};
pub use naming::namespace_for_sub;
pub use request_id::{MAX_REQUEST_ID_LEN, is_valid_request_id, split_call_tag};
pub use runtime::{Runtime, RuntimeDescriptor};
pub use types::*;
pub use units::{human_bytes, human_duration_ms};
