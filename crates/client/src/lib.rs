//! sless client: a typed HTTP client of the REST API ([`client`]) on the types of
//! `sless-api`, and the packing of a folder into an upload ([`archive`]). No Kubernetes,
//! database or S3 dependency: the console, the CLI and the Terraform provider build on
//! this and `sless-api` alone.

pub mod archive;
pub mod client;
