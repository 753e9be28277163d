//! sless operator: the REST API, the `/fn` proxy and its serving, the event dispatcher
//! and the Kubernetes controllers (the production runner), on top of `sless-core`.

pub mod api;
pub mod dispatch;
pub mod k8s;
pub mod proxy;
pub mod serve;
