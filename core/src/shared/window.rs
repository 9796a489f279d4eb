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

use std::cell::Cell;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    index: i64,
    a: u64,
    b: u64,
}

/// [`Window::sums`] over the window ending at bucket `index`.
#[derive(Clone, Copy, Debug)]
struct Sums {
    index: i64,
    a: u64,
    b: u64,
}

/// Two counters (`a`, `b`) over a sliding window.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    width: f64,
    buckets: [Bucket; SLOTS],
    /// The last `sums`, kept while every count since went to its bucket (counted in it
    /// too): a breaker asks for the sums at every outcome, nearly always in the bucket of
    /// the one before, and then they are not added up again over every bucket.
    sums: Cell<Option<Sums>>,
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
            sums: Cell::new(None),
        }
    }

    /// The bucket index of a time (`as` saturates: no overflow for any finite `now`).
    pub(crate) fn index(&self, now: f64) -> i64 {
        (now / self.width).floor() as i64
    }

    /// Count `a` and `b` more in the bucket of `now`. The kept sums follow when they end
    /// at that bucket; otherwise they are dropped (the count may fall inside their window).
    fn add(&mut self, now: f64, a: u64, b: u64) {
        let index = self.index(now);
        let slot = index.rem_euclid(SLOTS as i64) as usize;
        let bucket = &mut self.buckets[slot];
        if bucket.index != index {
            *bucket = Bucket { index, a: 0, b: 0 };
        }
        bucket.a = bucket.a.saturating_add(a);
        bucket.b = bucket.b.saturating_add(b);
        let kept = self.sums.get_mut();
        match kept {
            Some(sums) if sums.index == index => {
                sums.a = sums.a.saturating_add(a);
                sums.b = sums.b.saturating_add(b);
            }
            _ => *kept = None,
        }
    }

    pub(crate) fn add_a(&mut self, now: f64) {
        self.add(now, 1, 0);
    }

    pub(crate) fn add_b(&mut self, now: f64) {
        self.add(now, 0, 1);
    }

    /// The sums of `a` and `b` over the window ending at `now`.
    pub(crate) fn sums(&self, now: f64) -> (u64, u64) {
        let current = self.index(now);
        if let Some(sums) = self.sums.get() {
            if sums.index == current {
                return (sums.a, sums.b);
            }
        }
        let oldest = current.saturating_sub(BUCKETS as i64 - 1);
        let (a, b) = self
            .buckets
            .iter()
            .filter(|b| b.index != i64::MIN && b.index >= oldest && b.index <= current)
            .fold((0u64, 0u64), |(a, b), x| {
                (a.saturating_add(x.a), b.saturating_add(x.b))
            });
        self.sums.set(Some(Sums {
            index: current,
            a,
            b,
        }));
        (a, b)
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
        *self.sums.get_mut() = None;
        for b in &mut self.buckets {
            *b = Bucket {
                index: i64::MIN,
                a: 0,
                b: 0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sums added up over every bucket, as `sums` does when it keeps none.
    fn added_up(w: &Window, now: f64) -> (u64, u64) {
        let current = w.index(now);
        let oldest = current.saturating_sub(BUCKETS as i64 - 1);
        w.buckets
            .iter()
            .filter(|b| b.index != i64::MIN && b.index >= oldest && b.index <= current)
            .fold((0, 0), |(a, b), x| (a + x.a, b + x.b))
    }

    proptest! {
        /// The kept sums are always the sums added up, whatever the order of counts,
        /// questions and clearings, with time going forward or back (times drawn from a
        /// few buckets, so that each bucket is asked about again).
        #[test]
        fn kept_sums_are_the_sums_added_up(
            ops in prop::collection::vec((0u8..7, 0i64..80, 0.0f64..1.0), 1..300)
        ) {
            let mut w = Window::new(1.0);
            let width = 1.0 / BUCKETS as f64;
            for (op, bucket, within) in ops {
                let now = (bucket as f64 + within * 0.99) * width;
                match op {
                    0 | 1 => w.add_a(now),
                    2 | 3 => w.add_b(now),
                    4 => w.clear(),
                    _ => prop_assert_eq!(w.sums(now), added_up(&w, now)),
                }
            }
        }
    }
}
