//! Property tests of the shared objects (docs/contract.md#shared-objects): the breaker against a
//! simple reference model over random event sequences, the budget never exceeded under any
//! interleaving, bulkhead permits never leaked nor granted out of FIFO order.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use sdax_core::shared::breaker::Probe;
use sdax_core::shared::{
    Acquire, Admission, BreakerState, Bulkhead, CancelWaiter, CircuitBreaker, RetryBudget,
    Transition,
};

/// The buckets of the windowed counts: 64 per window (core/src/shared/window.rs).
const BUCKETS: i64 = 64;

fn bucket(now: f64, window: f64) -> i64 {
    (now / (window / BUCKETS as f64)).floor() as i64
}

fn in_window(at: f64, now: f64, window: f64) -> bool {
    let (b, n) = (bucket(at, window), bucket(now, window));
    b <= n && b > n - BUCKETS
}

/// A retry as the budget counts it: one bucket longer than `in_window`.
fn in_wide_window(at: f64, now: f64, window: f64) -> bool {
    let (b, n) = (bucket(at, window), bucket(now, window));
    b <= n && b >= n - BUCKETS
}

/// docs/contract.md#retry-budget read literally: within the trailing `window` seconds.
fn in_exact_window(at: f64, now: f64, window: f64) -> bool {
    at <= now && now - at < window
}

// ---------------------------------------------------------------- breaker

#[derive(Clone, Debug)]
enum BreakerOp {
    /// Advance the clock by this many milliseconds.
    Tick(u16),
    Admit,
    /// `admit_if_closed`: the closed case of `admit`, or nothing at all.
    AdmitIfClosed,
    /// Finish outstanding attempt `i % len` with this outcome.
    Finish(usize, bool),
    /// Outstanding attempt `i % len` ends without an outcome.
    Drop(usize),
}

fn breaker_op() -> impl Strategy<Value = BreakerOp> {
    prop_oneof![
        (0u16..3000).prop_map(BreakerOp::Tick),
        Just(BreakerOp::Admit),
        Just(BreakerOp::AdmitIfClosed),
        (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| BreakerOp::Finish(i, ok)),
        any::<usize>().prop_map(BreakerOp::Drop),
    ]
}

/// The reference: docs/contract.md#circuit-breaker read literally, outcomes kept as a list of
/// times.
#[derive(Debug)]
enum ModelState {
    Closed,
    Open(f64),
    HalfOpen { period: u64, admitted: u64, ok: u64 },
}

struct Model {
    ratio: f64,
    min_calls: u64,
    window: f64,
    break_for: f64,
    probes: u64,
    state: ModelState,
    period: u64,
    outcomes: Vec<(f64, bool)>,
}

impl Model {
    fn state(&self, now: f64) -> BreakerState {
        match self.state {
            ModelState::Closed => BreakerState::Closed,
            ModelState::Open(until) if now < until => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    fn admit(&mut self, now: f64) -> (Result<Option<u64>, f64>, Option<Transition>) {
        let mut t = None;
        if let ModelState::Open(until) = self.state {
            if now < until {
                return (Err(until - now), None);
            }
            self.period += 1;
            self.state = ModelState::HalfOpen {
                period: self.period,
                admitted: 0,
                ok: 0,
            };
            t = Some(Transition::HalfOpened);
        }
        match &mut self.state {
            ModelState::Closed => (Ok(None), t),
            ModelState::HalfOpen {
                period, admitted, ..
            } if *admitted < self.probes => {
                *admitted += 1;
                (Ok(Some(*period)), t)
            }
            _ => (Err(self.break_for), t),
        }
    }

    fn record(&mut self, now: f64, success: bool, probe: Option<u64>) -> Option<Transition> {
        match (&mut self.state, probe) {
            (ModelState::Closed, None) => {
                self.outcomes.push((now, success));
                let inside: Vec<bool> = self
                    .outcomes
                    .iter()
                    .filter(|(at, _)| in_window(*at, now, self.window))
                    .map(|(_, ok)| *ok)
                    .collect();
                let failures = inside.iter().filter(|ok| !**ok).count() as f64;
                let total = inside.len() as u64;
                if total >= self.min_calls && failures / total as f64 >= self.ratio {
                    self.state = ModelState::Open(now + self.break_for);
                    return Some(Transition::Opened);
                }
                None
            }
            (ModelState::HalfOpen { period, ok, .. }, Some(p)) if *period == p => {
                if success {
                    *ok += 1;
                    if *ok >= self.probes {
                        self.state = ModelState::Closed;
                        self.outcomes.clear();
                        return Some(Transition::Closed);
                    }
                    None
                } else {
                    self.state = ModelState::Open(now + self.break_for);
                    Some(Transition::Opened)
                }
            }
            _ => None,
        }
    }

    fn forget(&mut self, probe: u64) {
        if let ModelState::HalfOpen {
            period,
            admitted,
            ok,
        } = &mut self.state
        {
            if *period == probe && *admitted > *ok {
                *admitted -= 1;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn breaker_follows_the_reference_model(
        ratio_pct in 1u32..=100,
        min_calls in 1i64..8,
        probes in 1i64..4,
        ops in prop::collection::vec(breaker_op(), 1..300),
    ) {
        let ratio = ratio_pct as f64 / 100.0;
        let (window, break_for) = (4.0, 2.0);
        let mut cb = CircuitBreaker::new(ratio, min_calls, window, break_for, probes).unwrap();
        let mut model = Model {
            ratio, min_calls: min_calls as u64, window, break_for, probes: probes as u64,
            state: ModelState::Closed, period: 0, outcomes: Vec::new(),
        };
        let mut now_ms: u64 = 0;
        // Outstanding attempts: (probe of the core, probe of the model).
        let mut out: Vec<(Option<Probe>, Option<u64>)> = Vec::new();
        for op in ops {
            let now = now_ms as f64 / 1000.0;
            match op {
                BreakerOp::Tick(ms) => now_ms += ms as u64,
                BreakerOp::Admit => {
                    let (a, t) = cb.admit(now);
                    let (m, mt) = model.admit(now);
                    prop_assert_eq!(t, mt);
                    match (a, m) {
                        (Admission::Allowed { probe }, Ok(mp)) => {
                            prop_assert_eq!(probe.is_some(), mp.is_some());
                            out.push((probe, mp));
                        }
                        (Admission::Rejected { retry_after }, Err(mr)) => {
                            prop_assert!((retry_after - mr).abs() < 1e-9);
                            prop_assert!(retry_after > 0.0);
                        }
                        (a, m) => prop_assert!(false, "core {:?}, model {:?}", a, m),
                    }
                }
                BreakerOp::AdmitIfClosed => {
                    // Allowed exactly when the model's `admit` would allow without a probe
                    // and without a transition; refused, nothing changes (the model is not
                    // asked at all).
                    let closed = matches!(model.state, ModelState::Closed);
                    prop_assert_eq!(cb.admit_if_closed(), closed);
                    if closed {
                        out.push((None, None));
                    }
                }
                BreakerOp::Finish(i, ok) if !out.is_empty() => {
                    let (p, mp) = out.remove(i % out.len());
                    prop_assert_eq!(cb.record(now, ok, p), model.record(now, ok, mp));
                }
                BreakerOp::Drop(i) if !out.is_empty() => {
                    let (p, mp) = out.remove(i % out.len());
                    if let (Some(p), Some(mp)) = (p, mp) {
                        cb.forget_probe(p);
                        model.forget(mp);
                    }
                }
                _ => {}
            }
            prop_assert_eq!(cb.state(now), model.state(now));
        }
    }
}

// ---------------------------------------------------------------- budget

#[derive(Clone, Debug)]
enum BudgetOp {
    Tick(u16),
    Deposit,
    Take,
}

fn budget_op() -> impl Strategy<Value = BudgetOp> {
    prop_oneof![
        1 => (0u16..2000).prop_map(BudgetOp::Tick),
        3 => Just(BudgetOp::Deposit),
        3 => Just(BudgetOp::Take),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every retry granted fits the rule of docs/contract.md#retry-budget counted over the trailing
    /// window, and every retry refused would not have fitted.
    #[test]
    fn budget_is_never_exceeded(
        ratio_pct in 0u32..150,
        reserve_tenths in 0u32..20,
        ops in prop::collection::vec(budget_op(), 1..400),
    ) {
        let ratio = ratio_pct as f64 / 100.0;
        let mps = reserve_tenths as f64 / 10.0;
        let window = 3.0;
        let mut b = RetryBudget::new(ratio, mps, window).unwrap();
        let (mut firsts, mut retries) = (Vec::<f64>::new(), Vec::<f64>::new());
        let mut now_ms: u64 = 0;
        for op in ops {
            let now = now_ms as f64 / 1000.0;
            let count = |v: &Vec<f64>| v.iter().filter(|&&at| in_window(at, now, window)).count() as f64;
            let wide = |v: &Vec<f64>| v.iter().filter(|&&at| in_wide_window(at, now, window)).count() as f64;
            let exact = |v: &Vec<f64>| v.iter().filter(|&&at| in_exact_window(at, now, window)).count() as f64;
            let allowance = ratio * count(&firsts) + mps * window;
            match op {
                BudgetOp::Tick(ms) => now_ms += ms as u64,
                BudgetOp::Deposit => { b.deposit(now); firsts.push(now); }
                BudgetOp::Take => {
                    let fits = wide(&retries) + 1.0 <= allowance + 1e-9 * allowance.max(1.0);
                    prop_assert_eq!(b.try_take(now), fits);
                    if fits {
                        retries.push(now);
                        // At the moment a retry is granted, the exact trailing window holds
                        // no more retries than the rule allows over it (later, first attempts
                        // expiring may leave it over: then nothing more is granted).
                        let exact_allowance = ratio * exact(&firsts) + mps * window;
                        prop_assert!(
                            exact(&retries) <= exact_allowance + 1e-6 * exact_allowance.max(1.0),
                            "{} retries in the window, {} allowed", exact(&retries), exact_allowance
                        );
                    }
                }
            }
            let avail = b.available(now);
            prop_assert!(avail >= 0.0);
            let expected = (ratio * count(&firsts) + mps * window - wide(&retries)).max(0.0);
            prop_assert!((avail - expected).abs() < 1e-9, "{} vs {}", avail, expected);
        }
    }
}

/// A retry is counted for the whole trailing window: the reserve spent at 0.1 s is not
/// spent again at 10.0 s, when those retries are 9.9 s old (a window counted in buckets
/// alone would have let them go with their bucket, [0, 0.15625)).
#[test]
fn budget_forgets_no_retry_within_the_window() {
    let mut b = RetryBudget::new(0.0, 1.0, 10.0).unwrap();
    for _ in 0..10 {
        assert!(b.try_take(0.1));
    }
    assert!(!b.try_take(0.1));
    assert!(!b.try_take(10.0));
    assert_eq!(b.available(10.0), 0.0);
    assert!(b.try_take(10.2)); // 10.1 s old: out of the window
}

/// Threads racing on one budget at one instant: the retries granted are exactly the
/// allowance, never more.
#[test]
fn budget_holds_under_threads() {
    let budget = Arc::new(Mutex::new(RetryBudget::new(0.1, 0.5, 10.0).unwrap()));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let mut taken = 0;
                for _ in 0..500 {
                    let mut b = budget.lock().unwrap();
                    b.deposit(1.0);
                    taken += usize::from(b.try_take(1.0)) + usize::from(b.try_take(1.0));
                }
                taken
            })
        })
        .collect();
    let _: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let mut b = budget.lock().unwrap();
    let (firsts, retries) = b.counts(1.0);
    assert_eq!(firsts, 4000);
    // 0.1 × 4000 + 0.5 × 10 = 405 allowed in all; with every thread asking for more
    // than it is owed, all of it is taken and not one more.
    assert!(retries as f64 <= 405.0, "{retries}");
    assert!(retries >= 400, "{retries}");
    assert_eq!(b.available(1.0), 405.0 - retries as f64);
}

// ---------------------------------------------------------------- bulkhead

#[derive(Clone, Debug)]
enum BulkOp {
    Acquire,
    /// `try_acquire_free`: `try_acquire`'s grant, or nothing at all.
    AcquireFree,
    /// A holder releases.
    Release,
    /// A granted waiter `i % len` claims its permit.
    Claim(usize),
    /// A waiter (queued or granted) `i % len` is cancelled.
    Cancel(usize),
}

fn bulk_op() -> impl Strategy<Value = BulkOp> {
    prop_oneof![
        3 => Just(BulkOp::Acquire),
        2 => Just(BulkOp::AcquireFree),
        2 => Just(BulkOp::Release),
        2 => any::<usize>().prop_map(BulkOp::Claim),
        1 => any::<usize>().prop_map(BulkOp::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bulkhead_never_leaks_nor_breaks_fifo(
        max_concurrent in 1i64..5,
        max_waiting in 0i64..5,
        ops in prop::collection::vec(bulk_op(), 1..300),
    ) {
        let mut b = Bulkhead::new(max_concurrent, max_waiting).unwrap();
        let (maxc, maxw) = (max_concurrent as u64, max_waiting as u64);
        let mut holders: u64 = 0;
        let mut queue: VecDeque<u64> = VecDeque::new();
        let mut granted: Vec<u64> = Vec::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let wake = |id: Option<u64>, queue: &mut VecDeque<u64>, granted: &mut Vec<u64>| -> Result<(), TestCaseError> {
            // A permit passed on goes to the head of the queue, or to the pool.
            prop_assert_eq!(id, queue.front().copied());
            if let Some(id) = id {
                queue.pop_front();
                granted.push(id);
            }
            Ok(())
        };
        for op in ops {
            match op {
                BulkOp::Acquire => match b.try_acquire() {
                    Acquire::Granted => {
                        prop_assert!(queue.is_empty());
                        holders += 1;
                    }
                    Acquire::Queued(id) => {
                        prop_assert!(seen.insert(id), "id reused");
                        prop_assert!(holders + granted.len() as u64 == maxc);
                        queue.push_back(id);
                    }
                    Acquire::Rejected => {
                        prop_assert_eq!(queue.len() as u64, maxw);
                        prop_assert!(holders + granted.len() as u64 == maxc);
                    }
                },
                BulkOp::AcquireFree => {
                    let free = queue.is_empty() && holders + (granted.len() as u64) < maxc;
                    prop_assert_eq!(b.try_acquire_free(), free);
                    if free {
                        holders += 1;
                    }
                }
                BulkOp::Release if holders > 0 => {
                    holders -= 1;
                    let next = b.release().unwrap();
                    wake(next, &mut queue, &mut granted)?;
                }
                BulkOp::Claim(i) if !granted.is_empty() => {
                    let id = granted.remove(i % granted.len());
                    prop_assert!(b.claim(id));
                    holders += 1;
                }
                BulkOp::Cancel(i) if !queue.is_empty() || !granted.is_empty() => {
                    let n = queue.len() + granted.len();
                    let k = i % n;
                    if k < queue.len() {
                        let id = queue.remove(k).unwrap();
                        prop_assert_eq!(b.cancel_waiter(id), CancelWaiter::Removed);
                    } else {
                        let id = granted.remove(k - queue.len());
                        let CancelWaiter::PassedOn(next) = b.cancel_waiter(id) else {
                            return Err(TestCaseError::fail("granted waiter unknown"));
                        };
                        wake(next, &mut queue, &mut granted)?;
                    }
                }
                _ => {}
            }
            prop_assert!(b.in_use() <= maxc);
            prop_assert!(b.waiting() <= maxw);
            prop_assert_eq!(b.in_use(), holders + granted.len() as u64);
            prop_assert_eq!(b.waiting(), queue.len() as u64);
        }
        // Everyone goes away: nothing is left.
        for id in queue.drain(..).collect::<Vec<_>>() {
            prop_assert_eq!(b.cancel_waiter(id), CancelWaiter::Removed);
        }
        for id in granted.drain(..) {
            prop_assert_eq!(b.cancel_waiter(id), CancelWaiter::PassedOn(None));
        }
        for _ in 0..holders {
            prop_assert_eq!(b.release(), Ok(None));
        }
        prop_assert_eq!((b.in_use(), b.waiting()), (0, 0));
    }
}

/// Threads hammering one bulkhead through a lock: never more than `max_concurrent` out,
/// and nothing left at the end.
#[test]
fn bulkhead_holds_under_threads() {
    let b = Arc::new(Mutex::new(Bulkhead::new(3, 2).unwrap()));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    let got = b.lock().unwrap().try_acquire();
                    match got {
                        Acquire::Granted => {
                            assert!(b.lock().unwrap().in_use() <= 3);
                            std::thread::yield_now();
                            let mut g = b.lock().unwrap();
                            if let Some(next) = g.release().unwrap() {
                                // The woken waiter's thread is gone in this test: it
                                // cancels, passing the permit on.
                                let mut pass = g.cancel_waiter(next);
                                while let CancelWaiter::PassedOn(Some(n)) = pass {
                                    pass = g.cancel_waiter(n);
                                }
                            }
                        }
                        Acquire::Queued(id) => {
                            let mut g = b.lock().unwrap();
                            let mut pass = g.cancel_waiter(id);
                            while let CancelWaiter::PassedOn(Some(n)) = pass {
                                pass = g.cancel_waiter(n);
                            }
                        }
                        Acquire::Rejected => {}
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let g = b.lock().unwrap();
    assert_eq!((g.in_use(), g.waiting()), (0, 0));
}
