//! State shared by every run in the process (docs/contract.md#shared-objects): bulkheads, circuit
//! breakers, retry budgets and nodes' latency windows.
//!
//! Each object is a plain state machine. It never reads a clock: every call that depends
//! on time is handed `now` (seconds of a monotonic clock). Callers on several threads read
//! the clock before taking the object's lock, so a call may arrive with a `now` slightly
//! older than one already seen; the objects treat time as never going backwards (the
//! latest `now` seen wins) and ignore a NaN `now` the same way.
//!
//! Sharing across threads is the caller's business: one lock per object (the bindings hold
//! each in a `Mutex`).

pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod latency;
mod window;

pub use breaker::{Admission, BreakerState, CircuitBreaker, Probe, Transition};
pub use budget::RetryBudget;
pub use bulkhead::{Acquire, Bulkhead, BulkheadError, CancelWaiter};
pub use latency::{Latency, LatencyWindow};

use std::fmt;

/// Why a constructor argument was refused (docs/contract.md#shared-objects). Integer arguments
/// carry the value as given, saturated to the `i64` range; float arguments carry it as given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SharedError {
    /// `max_concurrent` below 1.
    MaxConcurrent(i64),
    /// `max_waiting` below 0.
    MaxWaiting(i64),
    /// `failure_ratio` outside (0, 1] or NaN.
    FailureRatio(f64),
    /// `min_calls` below 1.
    MinCalls(i64),
    /// `window` not finite or not above 0.
    Window(f64),
    /// `break_for` not finite or not above 0.
    BreakFor(f64),
    /// `probes` below 1.
    Probes(i64),
    /// `ratio` not finite or below 0.
    Ratio(f64),
    /// `min_per_second` not finite or below 0.
    MinPerSecond(f64),
    /// `percentile` outside (0, 100] or NaN.
    Percentile(f64),
    /// `min_samples` below 1.
    MinSamples(i64),
    /// `initial` not finite or below 0.
    Initial(f64),
    /// `hedge_after` (a number) not finite or below 0.
    HedgeAfter(f64),
    /// `hedges` below 1.
    Hedges(i64),
}

impl SharedError {
    /// The argument the error is about.
    pub fn argument(&self) -> &'static str {
        match self {
            SharedError::MaxConcurrent(_) => "max_concurrent",
            SharedError::MaxWaiting(_) => "max_waiting",
            SharedError::FailureRatio(_) => "failure_ratio",
            SharedError::MinCalls(_) => "min_calls",
            SharedError::Window(_) => "window",
            SharedError::BreakFor(_) => "break_for",
            SharedError::Probes(_) => "probes",
            SharedError::Ratio(_) => "ratio",
            SharedError::MinPerSecond(_) => "min_per_second",
            SharedError::Percentile(_) => "percentile",
            SharedError::MinSamples(_) => "min_samples",
            SharedError::Initial(_) => "initial",
            SharedError::HedgeAfter(_) => "hedge_after",
            SharedError::Hedges(_) => "hedges",
        }
    }

    /// What the argument must be.
    pub fn requirement(&self) -> &'static str {
        match self {
            SharedError::MaxConcurrent(_) => "max_concurrent must be an integer of at least 1",
            SharedError::MaxWaiting(_) => "max_waiting must be an integer of at least 0",
            SharedError::FailureRatio(_) => {
                "failure_ratio must be a number greater than 0 and at most 1"
            }
            SharedError::MinCalls(_) => "min_calls must be an integer of at least 1",
            SharedError::Window(_) => "window must be a finite number greater than 0",
            SharedError::BreakFor(_) => "break_for must be a finite number greater than 0",
            SharedError::Probes(_) => "probes must be an integer of at least 1",
            SharedError::Ratio(_) => "ratio must be a finite number greater than or equal to 0",
            SharedError::MinPerSecond(_) => {
                "min_per_second must be a finite number greater than or equal to 0"
            }
            SharedError::Percentile(_) => {
                "percentile must be a number greater than 0 and at most 100"
            }
            SharedError::MinSamples(_) => "min_samples must be an integer of at least 1",
            SharedError::Initial(_) => {
                "initial must be a finite number greater than or equal to 0 (seconds)"
            }
            SharedError::HedgeAfter(_) => {
                "hedge_after must be a finite number greater than or equal to 0 (seconds), \
                 a Latency, or None"
            }
            SharedError::Hedges(_) => "hedges must be an integer of at least 1",
        }
    }

    fn value(&self) -> String {
        match *self {
            SharedError::MaxConcurrent(v)
            | SharedError::MaxWaiting(v)
            | SharedError::MinCalls(v)
            | SharedError::Probes(v)
            | SharedError::MinSamples(v)
            | SharedError::Hedges(v) => v.to_string(),
            SharedError::FailureRatio(v)
            | SharedError::Window(v)
            | SharedError::BreakFor(v)
            | SharedError::Ratio(v)
            | SharedError::MinPerSecond(v)
            | SharedError::Percentile(v)
            | SharedError::Initial(v)
            | SharedError::HedgeAfter(v) => v.to_string(),
        }
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Invalid {}: {}; {}",
            self.argument(),
            self.value(),
            self.requirement()
        )
    }
}

impl std::error::Error for SharedError {}

/// `window` and `break_for`: finite and above 0.
pub(crate) fn positive_finite(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// `ratio` and `min_per_second`: finite and at least 0.
pub(crate) fn nonnegative_finite(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// An integer argument of at least `min`, as `u64` (the value is already known to be
/// at least `min >= 0`).
pub(crate) fn at_least(v: i64, min: i64) -> Option<u64> {
    if v >= min {
        u64::try_from(v).ok()
    } else {
        None
    }
}

/// The clock as the objects see it: never backwards, NaN ignored.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    latest: f64,
    seen: bool,
}

impl Clock {
    pub(crate) fn advance(&mut self, now: f64) -> f64 {
        if !now.is_nan() && (!self.seen || now > self.latest) {
            self.latest = now;
            self.seen = true;
        }
        self.latest
    }
}
