//! The web console (Leptos, rendered on the server only): the list of a namespace's
//! Functions and Services, their highlighted source, trigger start/stop, login. The
//! `server` crate wires these into axum routes with sessions, CSRF and headers.

pub mod actions;
pub mod console;
pub mod function;
pub mod highlight;
pub mod listing;
pub mod pages;
pub mod source_cache;
