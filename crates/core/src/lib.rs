//! sless core: what both modes share — the resource model and its validation, the store
//! seam, auth, uploads and build contexts, the S3 client, logs, metrics, the route
//! table the runners fill for the proxy, the archive of its call records, and the rule
//! of when a workload runs and is reachable. No Kubernetes client, no SQLite, no S3
//! server.

pub mod auth;
pub mod calls;
pub mod data_dir;
pub mod error_text;
pub mod logs;
pub mod metrics;
pub mod model;
pub mod quota;
pub mod request_id;
pub mod review;
pub mod routes;
pub mod s3;
pub mod store;
pub mod upload;
pub mod versions;
pub mod workload;
