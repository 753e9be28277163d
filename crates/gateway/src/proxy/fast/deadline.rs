//! Deadlines of the fast path: the header and idle timeouts of the next request, the
//! function's timeout of the call in flight.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{Instant, Sleep};

/// A deadline that costs a timer operation only when it moves earlier than its timer,
/// or when the timer fires before the deadline (then it is set again). On a kept-alive
/// connection each request and call moves its deadline later than the last one, so
/// the timer is touched about once per timeout instead of twice per call.
pub(super) struct LazyDeadline {
    timer: Pin<Box<Sleep>>,
    deadline: Instant,
}

impl LazyDeadline {
    pub(super) fn new(deadline: Instant) -> Self {
        Self {
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            deadline,
        }
    }

    pub(super) fn set(&mut self, deadline: Instant) {
        self.deadline = deadline;
        if deadline < self.timer.deadline() {
            self.timer.as_mut().reset(deadline);
        }
    }

    pub(super) async fn passed(&mut self) {
        loop {
            self.timer.as_mut().await;
            if Instant::now() >= self.deadline {
                return;
            }
            let deadline = self.deadline;
            self.timer.as_mut().reset(deadline);
        }
    }
}

/// `future`'s output, or None when `deadline` passed first.
pub(super) async fn within<F: Future>(
    deadline: Option<&mut LazyDeadline>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::select! {
            biased;
            output = future => Some(output),
            () = deadline.passed() => None,
        },
        None => Some(future.await),
    }
}
