//! A sliding window of counts in fixed memory.
//!
//! The window of `window` seconds is cut into [`BUCKETS`] buckets of `window / BUCKETS` seconds,
//! each aligned on a multiple of its width. A count made at time `t` falls in the bucket holding
//! `t`; at time `now` the window ([`Window::sums`]) holds the bucket of `now` and the
//! `BUCKETS - 1` before it. So a count stays in the window for at least `window - window /
//! BUCKETS` and at most `window` seconds after it was made: never longer than the trailing window
//! of docs/contract.md#circuit-breaker, and at most one bucket (1/64 of the window) shorter.
//!
//! [`Window::sums_wide`] also holds one bucket more for `b`: a `b` count stays in it for at least
//! `window` seconds (and at most one bucket longer). The retry budget counts its retries so: they
//! are never forgotten before the trailing window of docs/contract.md#retry-budget has let them go,
//! so the retries it grants never exceed the allowance counted over the exact window.

/// Buckets per window.
pub const BUCKETS: usize = 64;

/// Buckets kept: one more than a window, for [`Window::sums_wide`].
const SLOTS: usize = BUCKETS + 1;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    index: i64,
    a: u64,
    b: u64,
}

/// Two counters (`a`, `b`) over a sliding window.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    width: f64,
    buckets: [Bucket; SLOTS],
}

impl Window {
    pub(crate) fn new(window: f64) -> Self {
        Window {
            width: window / BUCKETS as f64,
            // Index i64::MIN marks an empty bucket: never inside any window.
            buckets: [Bucket {
                index: i64::MIN,
                a: 0,
                b: 0,
            }; SLOTS],
        }
    }

    /// The bucket index of a time (`as` saturates: no overflow for any finite `now`).
    pub(crate) fn index(&self, now: f64) -> i64 {
        (now / self.width).floor() as i64
    }

    fn bucket(&mut self, now: f64) -> &mut Bucket {
        let index = self.index(now);
        let slot = index.rem_euclid(SLOTS as i64) as usize;
        let bucket = &mut self.buckets[slot];
        if bucket.index != index {
            *bucket = Bucket { index, a: 0, b: 0 };
        }
        bucket
    }

    pub(crate) fn add_a(&mut self, now: f64) {
        let b = self.bucket(now);
        b.a = b.a.saturating_add(1);
    }

    pub(crate) fn add_b(&mut self, now: f64) {
        let b = self.bucket(now);
        b.b = b.b.saturating_add(1);
    }

    /// The sums of `a` and `b` over the window ending at `now`.
    pub(crate) fn sums(&self, now: f64) -> (u64, u64) {
        let current = self.index(now);
        let oldest = current.saturating_sub(BUCKETS as i64 - 1);
        self.buckets
            .iter()
            .filter(|b| b.index != i64::MIN && b.index >= oldest && b.index <= current)
            .fold((0u64, 0u64), |(a, b), x| {
                (a.saturating_add(x.a), b.saturating_add(x.b))
            })
    }

    /// The sum of `a` over the window ending at `now`, as `sums`; the sum of `b` over it and
    /// the bucket before it (see the module documentation).
    pub(crate) fn sums_wide(&self, now: f64) -> (u64, u64) {
        let current = self.index(now);
        let oldest = current.saturating_sub(BUCKETS as i64 - 1);
        let oldest_b = current.saturating_sub(BUCKETS as i64);
        self.buckets
            .iter()
            .filter(|b| b.index != i64::MIN && b.index >= oldest_b && b.index <= current)
            .fold((0u64, 0u64), |(a, b), x| {
                let a_in = if x.index >= oldest { x.a } else { 0 };
                (a.saturating_add(a_in), b.saturating_add(x.b))
            })
    }

    pub(crate) fn clear(&mut self) {
        for b in &mut self.buckets {
            *b = Bucket {
                index: i64::MIN,
                a: 0,
                b: 0,
            };
        }
    }
}
