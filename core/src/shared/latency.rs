//! A node's recent latency (docs/contract.md#latency): the `percentile` of its successful
//! attempts' durations within the trailing `window` seconds, `initial` until the window holds
//! `min_samples` of them. One [`LatencyWindow`] per node and Driver, shared by every run and
//! thread (the bindings hold it behind a lock); [`Latency`] is its validated configuration.
//!
//! Fixed memory: a ring of the latest `capacity` successes (time, duration), `capacity` =
//! `min_samples` clamped to [`MIN_CAPACITY`, `MAX_CAPACITY`]. When more successes than that fall
//! within the window, the oldest of them no longer count: the percentile is that of the latest
//! `capacity` successes within the window. The percentile is the nearest rank: the smallest
//! recorded duration such that at least `percentile` % of the samples are at most it.
//!
//! Like every shared object it never reads a clock: `now` is handed in, never goes backwards
//! (the latest seen wins, NaN ignored), and a sample recorded at `t` is within the window at
//! `now` while `now - t < window`.

use super::{at_least, nonnegative_finite, positive_finite, Clock, SharedError};

/// The ring never holds fewer samples than this.
pub const MIN_CAPACITY: usize = 512;
/// Nor more than this (a `min_samples` above it is never reached: `initial` stays).
pub const MAX_CAPACITY: usize = 65_536;

/// `Latency(percentile, *, window, min_samples, initial)`, validated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    percentile: f64,
    window: f64,
    min_samples: u64,
    initial: f64,
}

impl Latency {
    /// Validation per docs/contract.md#latency, in argument order.
    pub fn new(
        percentile: f64,
        window: f64,
        min_samples: i64,
        initial: f64,
    ) -> Result<Self, SharedError> {
        if !(percentile > 0.0 && percentile <= 100.0) {
            return Err(SharedError::Percentile(percentile));
        }
        if !positive_finite(window) {
            return Err(SharedError::Window(window));
        }
        let Some(min_samples) = at_least(min_samples, 1) else {
            return Err(SharedError::MinSamples(min_samples));
        };
        if !nonnegative_finite(initial) {
            return Err(SharedError::Initial(initial));
        }
        Ok(Latency {
            percentile,
            window,
            min_samples,
            initial,
        })
    }

    pub fn percentile(&self) -> f64 {
        self.percentile
    }
    pub fn window(&self) -> f64 {
        self.window
    }
    pub fn min_samples(&self) -> u64 {
        self.min_samples
    }
    pub fn initial(&self) -> f64 {
        self.initial
    }

    /// Samples the ring of a window of this configuration holds at most.
    pub fn capacity(&self) -> usize {
        usize::try_from(self.min_samples)
            .unwrap_or(MAX_CAPACITY)
            .clamp(MIN_CAPACITY, MAX_CAPACITY)
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct LatencyWindow {
    config: Latency,
    /// `(time recorded, duration)`, oldest first from `next` once full.
    ring: Vec<(f64, f64)>,
    next: usize,
    clock: Clock,
    scratch: Vec<f64>,
}

impl LatencyWindow {
    pub fn new(config: Latency) -> Self {
        let capacity = config.capacity();
        LatencyWindow {
            config,
            ring: Vec::with_capacity(capacity),
            next: 0,
            clock: Clock::default(),
            scratch: Vec::with_capacity(capacity),
        }
    }

    pub fn config(&self) -> Latency {
        self.config
    }

    /// A successful attempt that took `duration` seconds ended at `now`. A duration that is
    /// not finite or below 0 is not one an attempt can take: it is ignored.
    pub fn record(&mut self, now: f64, duration: f64) {
        let now = self.clock.advance(now);
        if !nonnegative_finite(duration) {
            return;
        }
        if self.ring.len() < self.config.capacity() {
            self.ring.push((now, duration));
        } else {
            self.ring[self.next] = (now, duration);
            self.next = (self.next + 1) % self.ring.len();
        }
    }

    fn collect(&mut self, now: f64) {
        let window = self.config.window;
        self.scratch.clear();
        self.scratch.extend(
            self.ring
                .iter()
                .filter(|(t, _)| now - t < window)
                .map(|&(_, d)| d),
        );
    }

    /// Successful attempts within the window at `now` that the ring still holds.
    pub fn samples(&mut self, now: f64) -> usize {
        let now = self.clock.advance(now);
        let window = self.config.window;
        self.ring.iter().filter(|(t, _)| now - t < window).count()
    }

    /// The delay after which a hedge is due at `now`: the percentile of the samples within
    /// the window, or `initial` while they number fewer than `min_samples`.
    pub fn hedge_after(&mut self, now: f64) -> f64 {
        let now = self.clock.advance(now);
        self.collect(now);
        let n = self.scratch.len();
        if (n as u64) < self.config.min_samples || n == 0 {
            return self.config.initial;
        }
        // Nearest rank: ceil(p / 100 × n), at least 1. The 1e-9 slack keeps a product such as
        // 0.95 × 20 (18.999999999999996) at the rank it means.
        let exact = self.config.percentile / 100.0 * n as f64;
        let rank = ((exact - 1e-9).ceil() as usize).clamp(1, n);
        let (_, value, _) = self
            .scratch
            .select_nth_unstable_by(rank - 1, f64::total_cmp);
        *value
    }
}
