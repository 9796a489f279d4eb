//! Retry budget (docs/contract.md#retry-budget): each first attempt deposits a token that counts
//! for `window` seconds; a retry is allowed when the retries taken within the window, this one
//! included, are at most `ratio` × first attempts within the window + `min_per_second` × `window`.
//! Both counts are kept in the buckets of `window.rs`, on the safe side of the exact trailing
//! window: a first attempt counts for at most `window` seconds (at least `window` less one bucket),
//! a retry for at least `window` seconds (at most one bucket more). So the retries taken within
//! any trailing `window` never exceed what the rule allows over that exact window.
//!
//! The comparison allows a relative slack of 1e-9 so that a product such as
//! `0.29 × 100` (28.999999999999996 in floating point) allows the 29 retries it means.

use super::window::Window;
use super::{nonnegative_finite, positive_finite, Clock, SharedError};

const SLACK: f64 = 1e-9;

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: f64,
    window_secs: f64,
    /// `a` = first attempts, `b` = retries taken.
    window: Window,
    clock: Clock,
}

impl RetryBudget {
    /// Validation per docs/contract.md#shared-objects.
    pub fn new(ratio: f64, min_per_second: f64, window: f64) -> Result<Self, SharedError> {
        if !nonnegative_finite(ratio) {
            return Err(SharedError::Ratio(ratio));
        }
        if !nonnegative_finite(min_per_second) {
            return Err(SharedError::MinPerSecond(min_per_second));
        }
        if !positive_finite(window) {
            return Err(SharedError::Window(window));
        }
        Ok(RetryBudget {
            ratio,
            min_per_second,
            window_secs: window,
            window: Window::new(window),
            clock: Clock::default(),
        })
    }

    pub fn ratio(&self) -> f64 {
        self.ratio
    }
    pub fn min_per_second(&self) -> f64 {
        self.min_per_second
    }
    pub fn window(&self) -> f64 {
        self.window_secs
    }

    /// A first attempt started.
    pub fn deposit(&mut self, now: f64) {
        let now = self.clock.advance(now);
        self.window.add_a(now);
    }

    fn allowance(&self, now: f64) -> (f64, u64) {
        let (firsts, retries) = self.window.sums_wide(now);
        (
            self.ratio * firsts as f64 + self.min_per_second * self.window_secs,
            retries,
        )
    }

    /// A retry wants to start: `true` (and it is counted) if the budget allows it.
    pub fn try_take(&mut self, now: f64) -> bool {
        let now = self.clock.advance(now);
        let (allowance, retries) = self.allowance(now);
        let wanted = retries as f64 + 1.0;
        if wanted <= allowance + SLACK * allowance.max(1.0) {
            self.window.add_b(now);
            true
        } else {
            false
        }
    }

    /// `ratio` × first attempts in the window + `min_per_second` × `window` − retries taken in the
    /// window (docs/contract.md#shared-objects), never below 0 (retries taken late in a window
    /// outlive the first attempts that allowed them, so the raw difference can dip below 0; no
    /// retry is allowed then, which is what 0 says).
    pub fn available(&mut self, now: f64) -> f64 {
        let now = self.clock.advance(now);
        let (allowance, retries) = self.allowance(now);
        (allowance - retries as f64).max(0.0)
    }

    /// (first attempts, retries taken) in the window at `now`, as the rule counts them.
    pub fn counts(&mut self, now: f64) -> (u64, u64) {
        let now = self.clock.advance(now);
        self.window.sums_wide(now)
    }
}
