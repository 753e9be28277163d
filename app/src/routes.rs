//! The console's page addresses, built in one place for the pages that link to them and
//! the actions that send a browser back to them.

use crate::listing::{WorkloadKind, url_encode};

/// The page's own address (what actions come back to).
pub fn function_href(namespace: &str, kind: WorkloadKind, name: &str) -> String {
    format!(
        "/funcs/{}/{}/{}",
        url_encode(namespace),
        kind.as_str(),
        url_encode(name)
    )
}

/// A job's page (what "Run again" comes back to).
pub fn job_href(namespace: &str, name: &str) -> String {
    format!("/funcs/{}/jobs/{}", url_encode(namespace), url_encode(name))
}

/// The source page of an entry.
pub fn source_href(namespace: &str, kind: WorkloadKind, name: &str) -> String {
    format!(
        "/funcs/{}/source/{}?kind={}",
        url_encode(namespace),
        url_encode(name),
        kind.as_str()
    )
}

/// A namespace's list page.
pub fn list_href(namespace: &str) -> String {
    format!("/funcs/{}", url_encode(namespace))
}

/// The create form of a namespace.
pub fn new_href(namespace: &str) -> String {
    format!("/funcs/{}/new", url_encode(namespace))
}

/// The changes between two kept versions of an entry.
pub fn diff_href(namespace: &str, kind: WorkloadKind, name: &str, from: &str, to: &str) -> String {
    format!(
        "{}/diff?from={}&to={}",
        function_href(namespace, kind, name),
        url_encode(from),
        url_encode(to)
    )
}
