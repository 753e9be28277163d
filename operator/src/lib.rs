//! sless operator: the resource model, REST API, auth, uploads, object storage, the
//! store seam and the runners.

pub mod api;
pub mod archive;
pub mod auth;
pub mod data_dir;
pub mod dispatch;
pub mod error_text;
pub mod k8s;
pub mod local;
pub mod logs;
pub mod metrics;
pub mod model;
pub mod proxy;
pub mod s3;
pub mod serve;
pub mod store;
pub mod upload;
