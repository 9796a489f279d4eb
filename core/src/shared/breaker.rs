//! Circuit breaker (docs/contract.md#circuit-breaker).
//!
//! * Closed: every attempt is allowed; outcomes (success / failure) are counted over the
//!   trailing `window` (see `window.rs` for the bucketing). When at least `min_calls`
//!   outcomes are in the window and failures / outcomes >= `failure_ratio`, it opens.
//! * Open for `break_for` seconds: every attempt is rejected with the seconds left.
//! * Half-open after that: up to `probes` attempts are let through as probes, the others
//!   rejected. All probes succeeding closes it with an empty window; a probe failing opens
//!   it again for `break_for`.
//!
//! Probes carry the half-open period they were admitted in, so the outcome of a probe
//! from an earlier period (finishing after the circuit already reopened) changes nothing.
//! A probe whose attempt ends without an outcome to record (cancelled, a non-retryable
//! failure) hands its place back with [`CircuitBreaker::forget_probe`].
//!
//! When all probes of a half-open period are out, a rejected attempt is told to retry
//! after `break_for`: the earliest the circuit can let another attempt through is when the
//! probes succeed, and if one fails it stays open that long.

use super::window::Window;
use super::{at_least, positive_finite, Clock, SharedError};

/// The three states of docs/contract.md#circuit-breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    /// `"closed"`, `"open"`, `"half_open"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// A change of state, for the caller to log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Closed or half-open → open.
    Opened,
    /// Open → half-open (the break is over; probes may go through).
    HalfOpened,
    /// Half-open → closed.
    Closed,
}

/// A probe's ticket: the half-open period it was admitted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe(pub u64);

/// The answer to [`CircuitBreaker::admit`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Go ahead; `probe` is set when the attempt is one of the half-open probes (hand it
    /// back to `record` or `forget_probe`).
    Allowed { probe: Option<Probe> },
    /// Fail at once with `CircuitOpen`.
    Rejected { retry_after: f64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Closed,
    Open { until: f64 },
    HalfOpen { admitted: u64, succeeded: u64 },
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct CircuitBreaker {
    failure_ratio: f64,
    min_calls: u64,
    window_secs: f64,
    break_for: f64,
    probes: u64,
    state: State,
    /// The current (or last) half-open period.
    period: u64,
    /// `a` = successes, `b` = failures.
    window: Window,
    clock: Clock,
}

impl CircuitBreaker {
    /// Validation per docs/contract.md#shared-objects.
    pub fn new(
        failure_ratio: f64,
        min_calls: i64,
        window: f64,
        break_for: f64,
        probes: i64,
    ) -> Result<Self, SharedError> {
        if !(failure_ratio > 0.0 && failure_ratio <= 1.0) {
            return Err(SharedError::FailureRatio(failure_ratio));
        }
        let min_calls = at_least(min_calls, 1).ok_or(SharedError::MinCalls(min_calls))?;
        if !positive_finite(window) {
            return Err(SharedError::Window(window));
        }
        if !positive_finite(break_for) {
            return Err(SharedError::BreakFor(break_for));
        }
        let probes = at_least(probes, 1).ok_or(SharedError::Probes(probes))?;
        Ok(CircuitBreaker {
            failure_ratio,
            min_calls,
            window_secs: window,
            break_for,
            probes,
            state: State::Closed,
            period: 0,
            window: Window::new(window),
            clock: Clock::default(),
        })
    }

    pub fn failure_ratio(&self) -> f64 {
        self.failure_ratio
    }
    pub fn min_calls(&self) -> u64 {
        self.min_calls
    }
    pub fn window(&self) -> f64 {
        self.window_secs
    }
    pub fn break_for(&self) -> f64 {
        self.break_for
    }
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// The state at `now` (an open circuit whose break is over reads as half-open).
    pub fn state(&mut self, now: f64) -> BreakerState {
        let now = self.clock.advance(now);
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// (successes, failures) in the window at `now`, counted while closed.
    pub fn outcomes(&mut self, now: f64) -> (u64, u64) {
        let now = self.clock.advance(now);
        self.window.sums(now)
    }

    /// May an attempt start at `now`? The transition, if this call made one, comes second.
    pub fn admit(&mut self, now: f64) -> (Admission, Option<Transition>) {
        let now = self.clock.advance(now);
        let mut transition = None;
        if let State::Open { until } = self.state {
            if now < until {
                return (
                    Admission::Rejected {
                        retry_after: until - now,
                    },
                    None,
                );
            }
            self.period = self.period.wrapping_add(1);
            self.state = State::HalfOpen {
                admitted: 0,
                succeeded: 0,
            };
            transition = Some(Transition::HalfOpened);
        }
        let admission = match &mut self.state {
            // `admit_if_closed`'s case
            State::Closed => Admission::Allowed { probe: None },
            State::HalfOpen { admitted, .. } if *admitted < self.probes => {
                *admitted += 1;
                Admission::Allowed {
                    probe: Some(Probe(self.period)),
                }
            }
            State::HalfOpen { .. } | State::Open { .. } => Admission::Rejected {
                retry_after: self.break_for,
            },
        };
        (admission, transition)
    }

    /// Admit an attempt only if [`CircuitBreaker::admit`] would allow it without a probe and
    /// without a transition, which is when the circuit is closed; otherwise change nothing
    /// (`false`): the caller then asks `admit`. No time is needed: only an outcome given to
    /// `record` closes or opens the circuit, and time moves an open one on, never a closed
    /// one. What the attempts admitted at once use (src/carry.rs, src/shared.rs); their
    /// outcome goes to `record` with no probe.
    pub fn admit_if_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The outcome of an allowed attempt: `success`, or a failure the node's policy counts
    /// as retryable. `probe` is what `admit` gave it.
    pub fn record(&mut self, now: f64, success: bool, probe: Option<Probe>) -> Option<Transition> {
        let now = self.clock.advance(now);
        match (probe, &mut self.state) {
            (None, State::Closed) => {
                if success {
                    self.window.add_a(now);
                } else {
                    self.window.add_b(now);
                }
                let (successes, failures) = self.window.sums(now);
                let total = successes.saturating_add(failures);
                if total >= self.min_calls && failures as f64 / total as f64 >= self.failure_ratio {
                    self.open(now);
                    return Some(Transition::Opened);
                }
                None
            }
            (Some(Probe(period)), State::HalfOpen { succeeded, .. }) if period == self.period => {
                if success {
                    *succeeded += 1;
                    if *succeeded >= self.probes {
                        self.state = State::Closed;
                        self.window.clear();
                        return Some(Transition::Closed);
                    }
                    None
                } else {
                    self.open(now);
                    Some(Transition::Opened)
                }
            }
            // Open or half-open, an attempt that is not a probe of the current period
            // (let through while closed, or a probe of an earlier period) is stale. An
            // attempt let through while closed that ends after the circuit closed again
            // took the first arm: a fresh outcome of the dependency.
            _ => None,
        }
    }

    /// A probe ended without an outcome to record: its place goes to another attempt.
    pub fn forget_probe(&mut self, probe: Probe) {
        if probe.0 != self.period {
            return;
        }
        if let State::HalfOpen {
            admitted,
            succeeded,
        } = &mut self.state
        {
            if *admitted > *succeeded {
                *admitted -= 1;
            }
        }
    }

    fn open(&mut self, now: f64) {
        self.state = State::Open {
            until: now + self.break_for,
        };
    }
}
