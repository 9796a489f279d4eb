//! Virtual-time tests of each rule of docs/contract.md#shared-objects for the shared objects: the
//! clock is a plain number handed to every call.

use sdax_core::shared::{
    Acquire, Admission, BreakerState, Bulkhead, BulkheadError, CancelWaiter, CircuitBreaker,
    RetryBudget, SharedError, Transition,
};

// ------------------------------ validation (docs/contract.md#shared-objects)

#[test]
fn constructors_refuse_out_of_range_values() {
    assert_eq!(
        Bulkhead::new(0, 0).unwrap_err(),
        SharedError::MaxConcurrent(0)
    );
    assert_eq!(
        Bulkhead::new(-3, 0).unwrap_err(),
        SharedError::MaxConcurrent(-3)
    );
    assert_eq!(
        Bulkhead::new(1, -1).unwrap_err(),
        SharedError::MaxWaiting(-1)
    );
    assert!(Bulkhead::new(1, 0).is_ok());
    assert!(Bulkhead::new(i64::MAX, i64::MAX).is_ok());

    let ok = |r: f64, m: i64, w: f64, b: f64, p: i64| CircuitBreaker::new(r, m, w, b, p);
    for bad in [0.0, -0.1, 1.0000001, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(ok(bad, 1, 1.0, 1.0, 1), Err(SharedError::FailureRatio(_))),
            "{bad}"
        );
    }
    assert!(ok(1.0, 1, 1.0, 1.0, 1).is_ok());
    assert!(ok(1e-9, 1, 1.0, 1.0, 1).is_ok());
    assert_eq!(
        ok(0.5, 0, 1.0, 1.0, 1).unwrap_err(),
        SharedError::MinCalls(0)
    );
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(ok(0.5, 1, bad, 1.0, 1), Err(SharedError::Window(_))),
            "{bad}"
        );
        assert!(
            matches!(ok(0.5, 1, 1.0, bad, 1), Err(SharedError::BreakFor(_))),
            "{bad}"
        );
    }
    assert_eq!(ok(0.5, 1, 1.0, 1.0, 0).unwrap_err(), SharedError::Probes(0));

    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            RetryBudget::new(bad, 1.0, 1.0),
            Err(SharedError::Ratio(_))
        ));
        assert!(matches!(
            RetryBudget::new(0.2, bad, 1.0),
            Err(SharedError::MinPerSecond(_))
        ));
    }
    assert!(matches!(
        RetryBudget::new(0.2, 1.0, 0.0),
        Err(SharedError::Window(_))
    ));
    assert!(RetryBudget::new(0.0, 0.0, 1.0).is_ok());
}

#[test]
fn errors_name_the_argument_and_the_rule() {
    let msg = SharedError::FailureRatio(1.5).to_string();
    assert_eq!(
        msg,
        "Invalid failure_ratio: 1.5; failure_ratio must be a number greater than 0 and at most 1"
    );
    assert_eq!(SharedError::MaxWaiting(-1).argument(), "max_waiting");
}

// ------------------------------ bulkhead (docs/contract.md#bulkhead)

#[test]
fn bulkhead_grants_up_to_max_then_queues_then_rejects() {
    let mut b = Bulkhead::new(2, 1).unwrap();
    assert_eq!(b.try_acquire(), Acquire::Granted);
    assert_eq!(b.try_acquire(), Acquire::Granted);
    let Acquire::Queued(w) = b.try_acquire() else {
        panic!()
    };
    assert_eq!(b.try_acquire(), Acquire::Rejected);
    assert_eq!((b.in_use(), b.waiting()), (2, 1));
    // A release hands the permit to the waiter: still 2 out, nobody waiting.
    assert_eq!(b.release(), Ok(Some(w)));
    assert_eq!((b.in_use(), b.waiting()), (2, 0));
    assert!(b.claim(w));
    assert!(!b.claim(w));
    for _ in 0..2 {
        assert_eq!(b.release(), Ok(None));
    }
    assert_eq!((b.in_use(), b.waiting()), (0, 0));
    assert_eq!(b.release(), Err(BulkheadError));
}

#[test]
fn bulkhead_without_waiting_room_rejects_at_once() {
    let mut b = Bulkhead::new(1, 0).unwrap();
    assert_eq!(b.try_acquire(), Acquire::Granted);
    assert_eq!(b.try_acquire(), Acquire::Rejected);
    assert_eq!(b.waiting(), 0);
}

#[test]
fn bulkhead_serves_waiters_first_in_first_out() {
    let mut b = Bulkhead::new(1, 3).unwrap();
    assert_eq!(b.try_acquire(), Acquire::Granted);
    let ids: Vec<u64> = (0..3)
        .map(|_| match b.try_acquire() {
            Acquire::Queued(id) => id,
            other => panic!("{other:?}"),
        })
        .collect();
    for &id in &ids {
        assert_eq!(b.release(), Ok(Some(id)));
        assert!(b.claim(id));
    }
    assert_eq!(b.release(), Ok(None));
    assert_eq!((b.in_use(), b.waiting()), (0, 0));
}

#[test]
fn a_newcomer_never_jumps_the_queue() {
    let mut b = Bulkhead::new(1, 2).unwrap();
    assert_eq!(b.try_acquire(), Acquire::Granted);
    let Acquire::Queued(w) = b.try_acquire() else {
        panic!()
    };
    assert_eq!(b.release(), Ok(Some(w)));
    // The permit is w's although w has not claimed it yet.
    assert!(matches!(b.try_acquire(), Acquire::Queued(_)));
}

#[test]
fn cancelled_waiters_leave_nothing_behind() {
    let mut b = Bulkhead::new(1, 2).unwrap();
    assert_eq!(b.try_acquire(), Acquire::Granted);
    let Acquire::Queued(w1) = b.try_acquire() else {
        panic!()
    };
    let Acquire::Queued(w2) = b.try_acquire() else {
        panic!()
    };
    // A queued waiter leaves the queue.
    assert_eq!(b.cancel_waiter(w1), CancelWaiter::Removed);
    assert_eq!(b.waiting(), 1);
    // Granted but cancelled before claiming: the permit passes to the next waiter...
    assert_eq!(b.release(), Ok(Some(w2)));
    let Acquire::Queued(w3) = b.try_acquire() else {
        panic!()
    };
    assert_eq!(b.cancel_waiter(w2), CancelWaiter::PassedOn(Some(w3)));
    assert!(!b.claim(w2));
    // ...or back to the pool when nobody waits.
    assert_eq!(b.cancel_waiter(w3), CancelWaiter::PassedOn(None));
    assert_eq!((b.in_use(), b.waiting()), (0, 0));
    assert_eq!(b.cancel_waiter(w3), CancelWaiter::Unknown);
    assert_eq!(b.cancel_waiter(999), CancelWaiter::Unknown);
}

// ------------------------------ breaker (docs/contract.md#circuit-breaker)

fn breaker(ratio: f64, min_calls: i64, probes: i64) -> CircuitBreaker {
    CircuitBreaker::new(ratio, min_calls, 10.0, 5.0, probes).unwrap()
}

fn allowed(a: (Admission, Option<Transition>)) -> Option<sdax_core::shared::breaker::Probe> {
    match a.0 {
        Admission::Allowed { probe } => probe,
        Admission::Rejected { .. } => panic!("rejected: {a:?}"),
    }
}

#[test]
fn breaker_opens_at_min_calls_and_failure_ratio() {
    let mut cb = breaker(0.5, 4, 1);
    assert_eq!(cb.state(0.0), BreakerState::Closed);
    // 3 failures: below min_calls, stays closed.
    for t in 0..3 {
        assert_eq!(cb.record(t as f64, false, None), None);
    }
    // A 4th outcome, a success: 3/4 >= 0.5 → opens.
    assert_eq!(cb.record(3.0, true, None), Some(Transition::Opened));
    assert_eq!(cb.state(3.0), BreakerState::Open);
}

#[test]
fn breaker_stays_closed_below_the_ratio() {
    let mut cb = breaker(0.5, 4, 1);
    for (t, ok) in [true, true, true, false, false].into_iter().enumerate() {
        assert_eq!(cb.record(t as f64, ok, None), None);
    }
    // 2 failures of 5: 0.4 < 0.5. One more failure: 3 of 6 = 0.5 → opens.
    assert_eq!(cb.record(5.0, false, None), Some(Transition::Opened));
}

#[test]
fn outcomes_older_than_the_window_do_not_count() {
    let mut cb = breaker(0.5, 4, 1);
    for t in 0..3 {
        cb.record(t as f64, false, None);
    }
    // Window is 10 s: at t = 12.5 the failures of t = 0, 1, 2 are gone.
    assert_eq!(cb.outcomes(12.5), (0, 0));
    assert_eq!(cb.record(12.5, false, None), None);
    assert_eq!(cb.outcomes(12.5), (0, 1));
    // At t = 9.9, all three are still in the window.
    let mut cb = breaker(0.5, 4, 1);
    for t in 0..3 {
        cb.record(t as f64, false, None);
    }
    assert_eq!(cb.record(9.9, false, None), Some(Transition::Opened));
}

#[test]
fn open_rejects_with_the_seconds_left_then_half_opens() {
    let mut cb = breaker(1.0, 1, 1);
    assert_eq!(cb.record(10.0, false, None), Some(Transition::Opened));
    let (a, t) = cb.admit(11.5);
    assert_eq!(a, Admission::Rejected { retry_after: 3.5 });
    assert_eq!(t, None);
    assert_eq!(cb.state(14.999), BreakerState::Open);
    assert_eq!(cb.state(15.0), BreakerState::HalfOpen);
    let (a, t) = cb.admit(15.0);
    assert!(matches!(a, Admission::Allowed { probe: Some(_) }));
    assert_eq!(t, Some(Transition::HalfOpened));
    // Only `probes` (1) through; others rejected.
    assert!(matches!(cb.admit(15.1).0, Admission::Rejected { retry_after } if retry_after == 5.0));
}

#[test]
fn all_probes_succeeding_close_with_an_empty_window() {
    let mut cb = breaker(0.5, 2, 2);
    cb.record(0.0, false, None);
    assert_eq!(cb.record(0.0, false, None), Some(Transition::Opened));
    let p1 = allowed(cb.admit(5.0));
    let p2 = allowed(cb.admit(5.0));
    assert!(p1.is_some() && p2.is_some());
    assert!(matches!(cb.admit(5.0).0, Admission::Rejected { .. }));
    assert_eq!(cb.record(5.5, true, p1), None);
    assert_eq!(cb.state(5.5), BreakerState::HalfOpen);
    assert_eq!(cb.record(5.6, true, p2), Some(Transition::Closed));
    assert_eq!(cb.state(5.6), BreakerState::Closed);
    assert_eq!(cb.outcomes(5.6), (0, 0));
    // Empty window: one failure alone (below min_calls = 2) does not reopen.
    assert_eq!(cb.record(5.7, false, None), None);
    assert_eq!(allowed(cb.admit(5.7)), None);
}

#[test]
fn a_probe_failing_opens_again_for_break_for() {
    let mut cb = breaker(1.0, 1, 2);
    cb.record(0.0, false, None);
    let p1 = allowed(cb.admit(5.0));
    let p2 = allowed(cb.admit(5.0));
    assert_eq!(cb.record(5.0, true, p1), None);
    assert_eq!(cb.record(6.0, false, p2), Some(Transition::Opened));
    assert_eq!(cb.admit(7.0).0, Admission::Rejected { retry_after: 4.0 });
    assert_eq!(cb.state(11.0), BreakerState::HalfOpen);
}

#[test]
fn stale_outcomes_change_nothing() {
    let mut cb = breaker(1.0, 1, 1);
    // An attempt admitted while closed finishes after the circuit opened.
    assert_eq!(allowed(cb.admit(0.0)), None);
    assert_eq!(cb.record(0.0, false, None), Some(Transition::Opened));
    assert_eq!(cb.record(0.5, true, None), None);
    assert_eq!(cb.state(0.5), BreakerState::Open);
    // A probe of an earlier half-open period reports after the circuit reopened.
    let old = allowed(cb.admit(5.0));
    assert_eq!(cb.record(5.0, false, old), Some(Transition::Opened));
    let new = allowed(cb.admit(10.0));
    assert_eq!(cb.record(10.1, true, old), None);
    assert_eq!(cb.state(10.1), BreakerState::HalfOpen);
    assert_eq!(cb.record(10.2, true, new), Some(Transition::Closed));
}

#[test]
fn an_attempt_spanning_a_full_cycle_counts_in_the_new_window() {
    let mut cb = breaker(1.0, 1, 1);
    assert_eq!(allowed(cb.admit(0.0)), None);
    assert_eq!(cb.record(0.0, false, None), Some(Transition::Opened));
    let p = allowed(cb.admit(5.0));
    assert_eq!(cb.record(5.0, true, p), Some(Transition::Closed));
    // The attempt let through at 0.0 ends now, with the circuit closed again.
    assert_eq!(cb.record(6.0, false, None), Some(Transition::Opened));
}

#[test]
fn a_forgotten_probe_frees_its_place() {
    let mut cb = breaker(1.0, 1, 1);
    cb.record(0.0, false, None);
    let p = allowed(cb.admit(5.0)).unwrap();
    assert!(matches!(cb.admit(5.0).0, Admission::Rejected { .. }));
    cb.forget_probe(p);
    let q = allowed(cb.admit(5.1));
    assert!(q.is_some());
    assert_eq!(cb.record(5.2, true, q), Some(Transition::Closed));
}

#[test]
fn time_never_goes_backwards() {
    let mut cb = breaker(1.0, 1, 1);
    cb.record(100.0, false, None);
    // A caller that read the clock before another one took the lock.
    assert_eq!(cb.admit(99.0).0, Admission::Rejected { retry_after: 5.0 });
    assert_eq!(
        cb.admit(f64::NAN).0,
        Admission::Rejected { retry_after: 5.0 }
    );
}

// ------------------------------ budget (docs/contract.md#retry-budget)

#[test]
fn budget_allows_ratio_of_first_attempts_plus_reserve() {
    let mut b = RetryBudget::new(0.2, 0.0, 10.0).unwrap();
    assert_eq!(b.available(0.0), 0.0);
    assert!(!b.try_take(0.0));
    for _ in 0..10 {
        b.deposit(0.0);
    }
    assert_eq!(b.available(0.0), 2.0);
    assert!(b.try_take(1.0));
    assert!(b.try_take(1.0));
    assert!(!b.try_take(1.0));
    assert_eq!(b.available(1.0), 0.0);
    assert_eq!(b.counts(1.0), (10, 2));
}

#[test]
fn budget_reserve_is_min_per_second_times_window() {
    let mut b = RetryBudget::new(0.2, 1.0, 3.0).unwrap();
    assert_eq!(b.available(0.0), 3.0);
    for _ in 0..3 {
        assert!(b.try_take(0.0));
    }
    assert!(!b.try_take(0.0));
    // The retries leave after the window, counted in buckets of 3/64 s on the safe side
    // (core/src/shared/window.rs): by one bucket after it the reserve is whole again.
    assert_eq!(b.available(2.999), 0.0);
    assert_eq!(b.available(3.0 + 3.0 / 64.0), 3.0);
    assert!(b.try_take(3.0 + 3.0 / 64.0));
}

#[test]
fn tokens_expire_after_the_window() {
    let mut b = RetryBudget::new(0.5, 0.0, 10.0).unwrap();
    for _ in 0..4 {
        b.deposit(0.0);
    }
    assert_eq!(b.available(9.9), 2.0);
    assert_eq!(b.available(10.0), 0.0);
    assert!(!b.try_take(10.0));
}

#[test]
fn available_is_fractional_and_the_slack_keeps_exact_products() {
    let mut b = RetryBudget::new(0.25, 0.0, 10.0).unwrap();
    for _ in 0..3 {
        b.deposit(0.0);
    }
    assert_eq!(b.available(0.0), 0.75);
    assert!(!b.try_take(0.0));
    let mut b = RetryBudget::new(0.29, 0.0, 10.0).unwrap();
    for _ in 0..100 {
        b.deposit(0.0);
    }
    let taken = (0..40).filter(|_| b.try_take(0.0)).count();
    assert_eq!(taken, 29);
}
