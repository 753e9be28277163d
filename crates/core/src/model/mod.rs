//! The resource model: CustomResource types (also the embedded store's model),
//! validation rules and naming. Every rule about what a valid resource is lives here.

mod job_runs;
mod naming;
mod resources;
mod validation;

pub use job_runs::*;
pub use naming::{build_namespace, deploy_namespace, function_url, workload_image};
pub use resources::*;
pub use sless_api::namespace_for_sub;
pub use sless_api::validation::*;
