//! A node's latency window (docs/contract.md#latency): validation, the nearest-rank percentile
//! of the successes within the trailing window under a virtual clock (every `now` is handed
//! in), `initial` until `min_samples`, fixed memory, sharing across threads; and property
//! tests against a plain reference model.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use sdax_core::shared::latency::{MAX_CAPACITY, MIN_CAPACITY};
use sdax_core::shared::{Latency, LatencyWindow, SharedError};

fn window(percentile: f64, window: f64, min_samples: i64, initial: f64) -> LatencyWindow {
    LatencyWindow::new(Latency::new(percentile, window, min_samples, initial).expect("valid"))
}

#[test]
fn validation_names_the_first_wrong_argument() {
    assert!(Latency::new(95.0, 60.0, 20, 0.1).is_ok());
    assert!(Latency::new(100.0, 1e-9, 1, 0.0).is_ok());
    assert!(Latency::new(1e-300, 1e300, i64::MAX, 1e300).is_ok());
    for bad in [
        0.0,
        -1.0,
        100.0000001,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        let err = Latency::new(bad, 60.0, 20, 0.1).unwrap_err();
        assert_eq!(err.argument(), "percentile", "{bad}");
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = Latency::new(95.0, bad, 20, 0.1).unwrap_err();
        assert_eq!(err.argument(), "window", "{bad}");
    }
    for bad in [0, -1, i64::MIN] {
        let err = Latency::new(95.0, 60.0, bad, 0.1).unwrap_err();
        assert_eq!(err, SharedError::MinSamples(bad));
    }
    for bad in [-0.001, f64::NAN, f64::INFINITY] {
        let err = Latency::new(95.0, 60.0, 20, bad).unwrap_err();
        assert_eq!(err.argument(), "initial", "{bad}");
    }
    // In argument order: percentile first.
    let err = Latency::new(0.0, 0.0, 0, -1.0).unwrap_err();
    assert_eq!(err.argument(), "percentile");
    assert_eq!(
        err.to_string(),
        "Invalid percentile: 0; percentile must be a number greater than 0 and at most 100"
    );
    assert_eq!(
        Latency::new(95.0, 60.0, 0, 0.1).unwrap_err().to_string(),
        "Invalid min_samples: 0; min_samples must be an integer of at least 1"
    );
}

#[test]
fn initial_until_min_samples_then_the_percentile() {
    let mut w = window(95.0, 60.0, 20, 0.1);
    assert_eq!(w.hedge_after(0.0), 0.1);
    for i in 0..19 {
        w.record(1.0 + i as f64, 0.001 * (i + 1) as f64);
        assert_eq!(w.hedge_after(1.0 + i as f64), 0.1, "{} samples", i + 1);
    }
    w.record(20.0, 0.020);
    // 20 samples 1..=20 ms: rank ceil(0.95 × 20) = 19, the 19th smallest.
    assert_eq!(w.samples(20.0), 20);
    assert!((w.hedge_after(20.0) - 0.019).abs() < 1e-12);
}

#[test]
fn samples_leave_the_trailing_window_and_initial_comes_back() {
    let mut w = window(50.0, 10.0, 2, 0.5);
    w.record(0.0, 1.0);
    w.record(5.0, 3.0);
    assert_eq!(w.hedge_after(5.0), 1.0); // rank ceil(0.5 × 2) = 1
    assert_eq!(w.samples(9.999), 2);
    // At 10.0 the sample of 0.0 is exactly `window` old: out.
    assert_eq!(w.samples(10.0), 1);
    assert_eq!(w.hedge_after(10.0), 0.5);
    w.record(12.0, 2.0);
    assert_eq!(w.hedge_after(12.0), 2.0);
    assert_eq!(w.hedge_after(100.0), 0.5);
}

#[test]
fn the_clock_never_goes_backwards_and_nan_is_ignored() {
    let mut w = window(100.0, 10.0, 1, 0.25);
    w.record(100.0, 0.3);
    // An older `now` (another thread read the clock first) is taken as the latest seen.
    assert_eq!(w.hedge_after(50.0), 0.3);
    assert_eq!(w.hedge_after(f64::NAN), 0.3);
    w.record(f64::NAN, 0.4); // recorded at the latest time seen
    assert_eq!(w.samples(109.0), 2);
    assert_eq!(w.hedge_after(110.0), 0.25);
}

#[test]
fn durations_no_attempt_can_take_are_ignored() {
    let mut w = window(100.0, 10.0, 1, 0.25);
    for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        w.record(1.0, bad);
    }
    assert_eq!(w.samples(1.0), 0);
    w.record(1.0, 0.0);
    assert_eq!(w.hedge_after(1.0), 0.0);
}

#[test]
fn memory_is_fixed_and_the_latest_successes_count() {
    let mut w = window(100.0, 1e9, 1, 0.0);
    assert_eq!(w.config().capacity(), MIN_CAPACITY);
    for i in 0..(3 * MIN_CAPACITY) {
        // A slow start, then fast calls only: once the ring has turned over, the slow ones
        // are gone.
        let duration = if i < MIN_CAPACITY { 9.0 } else { 0.001 };
        w.record(i as f64, duration);
    }
    let now = (3 * MIN_CAPACITY) as f64;
    assert_eq!(w.samples(now), MIN_CAPACITY);
    assert_eq!(w.hedge_after(now), 0.001);
    let big = Latency::new(95.0, 60.0, 1_000_000, 0.1).expect("valid");
    assert_eq!(big.capacity(), MAX_CAPACITY);
    assert_eq!(
        Latency::new(95.0, 60.0, 1000, 0.1)
            .expect("valid")
            .capacity(),
        1000
    );
}

#[test]
fn one_window_shared_by_threads_counts_every_success() {
    let shared = Arc::new(Mutex::new(window(95.0, 60.0, 20, 0.1)));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                for i in 0..100 {
                    let d = if i % 50 == 0 { 0.1 } else { 0.001 };
                    shared
                        .lock()
                        .expect("lock")
                        .record(t as f64 + i as f64 * 0.01, d);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let mut w = shared.lock().expect("lock");
    assert_eq!(w.samples(5.0), 400);
    // 8 slow calls of 400: the 95th percentile is a fast one.
    assert_eq!(w.hedge_after(5.0), 0.001);
}

// ------------------------------------------------------------------- properties

/// The reference: every sample kept, the nearest rank computed by sorting.
fn reference(samples: &[(f64, f64)], now: f64, config: &Latency) -> f64 {
    let capacity = config.capacity();
    let kept = &samples[samples.len().saturating_sub(capacity)..];
    let mut within: Vec<f64> = kept
        .iter()
        .filter(|(t, _)| now - t < config.window())
        .map(|&(_, d)| d)
        .collect();
    if (within.len() as u64) < config.min_samples() || within.is_empty() {
        return config.initial();
    }
    within.sort_by(f64::total_cmp);
    let n = within.len();
    let rank = ((config.percentile() / 100.0 * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
    within[rank - 1]
}

#[derive(Clone, Debug)]
enum Op {
    /// Advance the clock by this many milliseconds.
    Tick(u32),
    /// Record a success of this many microseconds.
    Record(u32),
    Ask,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..3_000).prop_map(Op::Tick),
        6 => (0u32..200_000).prop_map(Op::Record),
        2 => Just(Op::Ask),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The window answers what the reference answers, after any sequence of records and
    /// clock steps, and the answer is `initial` or one of the recorded durations.
    #[test]
    fn matches_the_reference(
        percentile in prop_oneof![Just(50.0), Just(95.0), Just(99.9), Just(100.0), 0.1f64..100.0],
        window_ms in 1u32..20_000,
        min_samples in 1i64..40,
        initial_us in 0u32..1_000_000,
        ops in proptest::collection::vec(op(), 0..1_500),
    ) {
        let config = Latency::new(
            percentile, window_ms as f64 / 1000.0, min_samples, initial_us as f64 / 1e6,
        ).expect("valid");
        let mut w = LatencyWindow::new(config);
        let mut kept: Vec<(f64, f64)> = Vec::new();
        let mut now = 0.0f64;
        for op in ops {
            match op {
                Op::Tick(ms) => now += ms as f64 / 1000.0,
                Op::Record(us) => {
                    let d = us as f64 / 1e6;
                    w.record(now, d);
                    kept.push((now, d));
                }
                Op::Ask => {
                    let got = w.hedge_after(now);
                    prop_assert_eq!(got, reference(&kept, now, &config));
                    prop_assert!(
                        got == config.initial() || kept.iter().any(|&(_, d)| d == got)
                    );
                }
            }
        }
        prop_assert_eq!(w.hedge_after(now), reference(&kept, now, &config));
    }

    /// A higher percentile never gives a shorter delay (same samples, past `min_samples`).
    #[test]
    fn monotone_in_the_percentile(
        durations in proptest::collection::vec(0u32..1_000_000, 1..300),
        low in 0.1f64..100.0,
        high in 0.1f64..100.0,
    ) {
        let (low, high) = if low <= high { (low, high) } else { (high, low) };
        let mut a = window(low, 60.0, 1, 0.0);
        let mut b = window(high, 60.0, 1, 0.0);
        for d in &durations {
            a.record(1.0, *d as f64 / 1e6);
            b.record(1.0, *d as f64 / 1e6);
        }
        prop_assert!(a.hedge_after(1.0) <= b.hedge_after(1.0));
        let max = durations.iter().max().copied().unwrap_or(0) as f64 / 1e6;
        prop_assert_eq!(window(100.0, 60.0, 1, 0.0).hedge_after(0.0), 0.0);
        prop_assert!(b.hedge_after(1.0) <= max);
    }
}
