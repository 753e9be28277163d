//! The `sless` binary's parts, as a library so that tests reach them in-process (the
//! console router above all): the CLI, the console, `sless up` and `sless operator`.

pub mod cli;
pub mod console;
pub mod demo;
pub mod operator_cmd;
pub mod serve;
pub mod settings;
pub mod up;
