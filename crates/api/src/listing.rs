//! The plain-text listing of a namespace, shared by `sless ls` and the console's
//! text/plain answer so both print the same columns the same way.

/// The columns, in order.
pub const LIST_COLUMNS: [&str; 7] = [
    "NAME",
    "KIND",
    "RUNTIME",
    "PHASE",
    "TRIGGERS",
    "INSTANCES",
    "URL",
];

/// `1/0-4`: running / min-max, `-` for a count the platform does not keep.
pub fn instances_text(running: Option<u32>, min: u32, max: u32) -> String {
    let running = running.map_or_else(|| "-".to_string(), |n| n.to_string());
    format!("{running}/{min}-{max}")
}
