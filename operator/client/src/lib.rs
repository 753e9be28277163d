//! The REST API's JSON types and a typed client of it. No Kubernetes, database or S3
//! dependency: the console, the CLI and the Terraform provider build on this alone.

pub mod apitypes;
pub mod client;
mod naming;
mod units;

pub use naming::namespace_for_sub;
pub use units::human_bytes;
