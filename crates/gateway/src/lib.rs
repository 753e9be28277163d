//! sless gateway: what callers and clients talk to, in both modes — the REST API
//! ([`api`]), the `/fn` proxy ([`proxy`]) and the serving loop both run on ([`serve`]),
//! and the event dispatcher that turns RabbitMQ messages into calls ([`dispatch`]).
//! Internal errors reach callers as an id only ([`request_id`]).
//! It sees the platform only through `sless-core`'s seams (store, route table, object
//! store), so `sless up` and `sless operator` wire it the same way.

pub mod api;
pub mod dispatch;
pub mod proxy;
pub mod request_id;
pub mod serve;
