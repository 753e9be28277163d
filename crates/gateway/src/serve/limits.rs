//! How long a connection may take and how many there may be, fitted to the process's
//! open-files limit.

use std::io;
use std::time::Duration;

/// How long a connection may take and how many there may be.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// From accepting a connection, or from the first byte of a later request, until
    /// its whole head has arrived.
    pub header_timeout: Duration,
    /// How long a connection with nothing in flight waits for its next request.
    pub idle_timeout: Duration,
    /// Connections served at once; more are accepted and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// File descriptors kept for everything but client connections (store, logs, function
/// processes' pipes).
const RESERVED_FDS: u64 = 512;

impl Limits {
    /// Raises the open-files soft limit to the hard one and lowers `max_connections`
    /// to fit it: each proxied call holds two descriptors (the caller's and the
    /// function's).
    pub fn fit_open_files_limit(mut self) -> Self {
        let available = match raise_open_files_limit() {
            Ok(limit) => limit,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or raise the open-files limit");
                return self;
            }
        };
        let fits =
            usize::try_from(available.saturating_sub(RESERVED_FDS) / 2).unwrap_or(usize::MAX);
        if self.max_connections > fits {
            tracing::info!(
                max_connections = self.max_connections,
                open_files = available,
                lowered_to = fits.max(1),
                "connection cap lowered to fit the open-files limit"
            );
            self.max_connections = fits.max(1);
        }
        self
    }
}

/// The soft limit after raising it to the hard one.
fn raise_open_files_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            tracing::warn!(error = %io::Error::last_os_error(), "cannot raise the open-files limit");
        }
    }
    Ok(limit.rlim_cur)
}
