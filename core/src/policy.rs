//! Attempt policies: validation, retry decision and jittered backoff delays.

use std::fmt;

use rand::Rng;

/// A number as the host language holds it, read exactly, before it is taken as seconds
/// or as a count (docs/contract.md#hostile-bindings).
///
/// Python's ints have no bound: the bindings read one that fits `i64` as it is, and one
/// beyond as its sign and its magnitude rounded to the nearest float (`None` beyond the
/// float range). Every rule about numbers (the ranges of
/// docs/contract.md#policy-validation, a run's timeout, a `retry_after` wait) applies to
/// [`Number::to_f64`], so a huge negative int is refused wherever `-1` is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A float, as it is (NaN and the infinities included).
    Float(f64),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer beyond `i64`: its sign, and its magnitude rounded to the nearest float,
    /// or `None` when that is beyond the float range.
    Big {
        /// Whether it is below zero.
        negative: bool,
        /// `|value|` rounded to the nearest float; `None` past `f64::MAX`.
        magnitude: Option<f64>,
    },
}

impl Number {
    /// The number as a float: a float as it is, an integer rounded to the nearest float;
    /// an integer beyond the float range is the infinity of its own sign.
    pub fn to_f64(self) -> f64 {
        match self {
            Number::Float(v) => v,
            // `as` rounds to the nearest float, as Python's `float(int)` does
            Number::Int(i) => i as f64,
            Number::Big {
                negative,
                magnitude,
            } => {
                let m = magnitude.map_or(f64::INFINITY, f64::abs);
                if negative {
                    -m
                } else {
                    m
                }
            }
        }
    }

    /// The number as a count (of retries): `None` for a float or a negative integer; an
    /// integer beyond `u32` saturates at `u32::MAX`.
    pub fn saturating_count(self) -> Option<u32> {
        match self {
            Number::Float(_) => None,
            Number::Int(i) if i < 0 => None,
            Number::Int(i) => Some(u32::try_from(i).unwrap_or(u32::MAX)),
            Number::Big { negative: true, .. } => None,
            Number::Big {
                negative: false, ..
            } => Some(u32::MAX),
        }
    }
}

/// A validated attempt policy (docs/contract.md#policy-validation), without the exception set (that
/// is Python's).
///
/// `retries` counts additional attempts: a job runs at most `1 + retries` times.
/// `max_delay` caps every retry wait (before the jitter, and a hinted wait); `retry_after`
/// says whether the job has a hook that may set the wait of a retry (the hook itself is the
/// driver's: see [`crate::run::Op::Hint`] and docs/internals.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    timeout: Option<f64>,
    retries: u32,
    initial_delay: f64,
    backoff_factor: f64,
    max_delay: Option<f64>,
    retry_after: bool,
}

/// Why a policy value was refused. Each variant carries the refused value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PolicyError {
    /// `timeout` is zero, negative, infinite or NaN.
    Timeout(f64),
    /// `initial_delay` is negative, infinite or NaN.
    InitialDelay(f64),
    /// `backoff_factor` is zero, negative, infinite or NaN.
    BackoffFactor(f64),
    /// `max_delay` is negative or NaN.
    MaxDelay(f64),
}

impl PolicyError {
    /// The argument the error is about.
    pub fn argument(&self) -> &'static str {
        match self {
            PolicyError::Timeout(_) => "timeout",
            PolicyError::InitialDelay(_) => "initial_delay",
            PolicyError::BackoffFactor(_) => "backoff_factor",
            PolicyError::MaxDelay(_) => "max_delay",
        }
    }

    /// What the argument must be.
    pub fn requirement(&self) -> &'static str {
        match self {
            PolicyError::Timeout(_) => "timeout must be a finite number greater than 0 or None",
            PolicyError::InitialDelay(_) => {
                "initial_delay must be a finite number greater than or equal to 0"
            }
            PolicyError::BackoffFactor(_) => {
                "backoff_factor must be a finite number greater than 0"
            }
            PolicyError::MaxDelay(_) => {
                "max_delay must be a number greater than or equal to 0 or None"
            }
        }
    }

    /// The refused value.
    pub fn value(&self) -> f64 {
        match *self {
            PolicyError::Timeout(v)
            | PolicyError::InitialDelay(v)
            | PolicyError::BackoffFactor(v)
            | PolicyError::MaxDelay(v) => v,
        }
    }
}

impl fmt::Display for PolicyError {
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

impl std::error::Error for PolicyError {}

impl Default for Policy {
    /// No timeout, no retries, `initial_delay = 1.0`, `backoff_factor = 2.0`.
    fn default() -> Self {
        Policy {
            timeout: None,
            retries: 0,
            initial_delay: 1.0,
            backoff_factor: 2.0,
            max_delay: None,
            retry_after: false,
        }
    }
}

impl Policy {
    /// Validate and build a policy.
    ///
    /// Checks, in order: `timeout` (`None` or finite and `> 0`), `initial_delay` (finite,
    /// `>= 0`), `backoff_factor` (finite, `> 0`). `retries` is any `u32`.
    pub fn new(
        timeout: Option<f64>,
        retries: u32,
        initial_delay: f64,
        backoff_factor: f64,
    ) -> Result<Self, PolicyError> {
        if let Some(t) = timeout {
            if !(t.is_finite() && t > 0.0) {
                return Err(PolicyError::Timeout(t));
            }
        }
        if !(initial_delay.is_finite() && initial_delay >= 0.0) {
            return Err(PolicyError::InitialDelay(initial_delay));
        }
        if !(backoff_factor.is_finite() && backoff_factor > 0.0) {
            return Err(PolicyError::BackoffFactor(backoff_factor));
        }
        Ok(Policy {
            timeout,
            retries,
            initial_delay,
            backoff_factor,
            max_delay: None,
            retry_after: false,
        })
    }

    /// The same policy with every retry wait capped at `max_delay` seconds (`None`: no cap).
    /// A cap must be `>= 0` and not NaN; `inf` is accepted and caps nothing.
    pub fn with_max_delay(self, max_delay: Option<f64>) -> Result<Self, PolicyError> {
        if let Some(m) = max_delay {
            if m.is_nan() || m < 0.0 {
                return Err(PolicyError::MaxDelay(m));
            }
        }
        Ok(Policy { max_delay, ..self })
    }

    /// The same policy with (or without) a `retry_after` hook.
    pub fn with_retry_after(self, retry_after: bool) -> Self {
        Policy {
            retry_after,
            ..self
        }
    }

    /// The cap on retry waits, if any.
    #[inline]
    pub fn max_delay(&self) -> Option<f64> {
        self.max_delay
    }

    /// Whether the job has a `retry_after` hook.
    #[inline]
    pub fn retry_after(&self) -> bool {
        self.retry_after
    }

    /// The wait a `retry_after` hint asks for, as taken: `min(hint, max_delay)`, no jitter.
    /// `None` when the hint is unusable: NaN, negative, or infinite without a cap.
    pub fn hinted_delay(&self, hint: f64) -> Option<f64> {
        if hint.is_nan() || hint < 0.0 {
            return None;
        }
        let wait = match self.max_delay {
            Some(cap) => hint.min(cap),
            None => hint,
        };
        wait.is_finite().then_some(wait)
    }

    /// Per-attempt timeout in seconds, if any.
    #[inline]
    pub fn timeout(&self) -> Option<f64> {
        self.timeout
    }

    /// Additional attempts allowed after the first.
    #[inline]
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Base of the backoff, in seconds.
    #[inline]
    pub fn initial_delay(&self) -> f64 {
        self.initial_delay
    }

    /// Growth factor of the backoff per retry.
    #[inline]
    pub fn backoff_factor(&self) -> f64 {
        self.backoff_factor
    }

    /// Whether a failure of attempt `attempt` (0-based) may be followed by another attempt.
    #[inline]
    pub fn may_retry(&self, attempt: u32, retryable: bool) -> bool {
        retryable && attempt < self.retries
    }

    /// `initial_delay * backoff_factor ** retry`, saturated to a finite value.
    ///
    /// Never NaN, never infinite: a product that overflows is `f64::MAX`, one that
    /// underflows is `0.0`, and `initial_delay == 0` always gives `0.0`.
    pub fn base_delay(&self, retry: u32) -> f64 {
        if self.initial_delay == 0.0 {
            return 0.0;
        }
        let growth = match i32::try_from(retry) {
            Ok(k) => self.backoff_factor.powi(k),
            Err(_) => self.backoff_factor.powf(f64::from(retry)),
        };
        let base = self.initial_delay * growth;
        if base.is_nan() {
            // Only reachable as 0 * inf, which cannot happen with the checks above, but keep
            // the promise unconditional.
            0.0
        } else if base > f64::MAX {
            f64::MAX
        } else {
            base
        }
    }

    /// `min(max_delay, initial_delay * backoff_factor ** retry)`: the wait before the jitter.
    pub fn capped_delay(&self, retry: u32) -> f64 {
        let base = self.base_delay(retry);
        match self.max_delay {
            Some(cap) if cap < base => cap,
            _ => base,
        }
    }

    /// `(low, high)` of the wait before retry `retry` (0-based): `(capped / 2, capped)` where
    /// `capped` is [`Policy::capped_delay`].
    pub fn delay_bounds(&self, retry: u32) -> (f64, f64) {
        let base = self.capped_delay(retry);
        (base * 0.5, base)
    }

    /// The jittered wait before retry `retry` (0-based):
    /// `min(max_delay, initial_delay * backoff_factor ** retry) * U(0.5, 1.0)`, within
    /// [`Policy::delay_bounds`].
    pub fn delay<R: Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> f64 {
        let base = self.capped_delay(retry);
        if base == 0.0 {
            return 0.0;
        }
        let jitter: f64 = rng.random_range(0.5..=1.0);
        // base * jitter <= base <= f64::MAX, and >= base / 2: always finite.
        base * jitter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn default_policy() {
        let p = Policy::default();
        assert_eq!(p.timeout(), None);
        assert_eq!(p.retries(), 0);
        assert_eq!(p.initial_delay(), 1.0);
        assert_eq!(p.backoff_factor(), 2.0);
        assert_eq!(Policy::new(None, 0, 1.0, 2.0), Ok(p));
    }

    #[test]
    fn validation_accepts_edges() {
        assert!(Policy::new(Some(1e-9), 0, 0.0, 1e-9).is_ok());
        assert!(Policy::new(Some(f64::MAX), u32::MAX, f64::MAX, f64::MAX).is_ok());
        assert!(Policy::new(None, 3, 0.5, 1.0).is_ok());
        assert!(Policy::new(None, 3, 0.5, 0.5).is_ok());
    }

    #[test]
    fn validation_refuses_out_of_range() {
        for t in [0.0, -0.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            let err = Policy::new(Some(t), 0, 1.0, 2.0).unwrap_err();
            assert!(matches!(err, PolicyError::Timeout(_)), "{t}");
            assert_eq!(err.argument(), "timeout");
        }
        for d in [-1e-9, f64::INFINITY, f64::NAN] {
            let err = Policy::new(None, 0, d, 2.0).unwrap_err();
            assert!(matches!(err, PolicyError::InitialDelay(_)), "{d}");
        }
        for b in [0.0, -2.0, f64::INFINITY, f64::NAN] {
            let err = Policy::new(None, 0, 1.0, b).unwrap_err();
            assert!(matches!(err, PolicyError::BackoffFactor(_)), "{b}");
        }
    }

    #[test]
    fn validation_order_is_timeout_delay_factor() {
        let err = Policy::new(Some(0.0), 0, -1.0, 0.0).unwrap_err();
        assert_eq!(err, PolicyError::Timeout(0.0));
        let err = Policy::new(None, 0, -1.0, 0.0).unwrap_err();
        assert_eq!(err, PolicyError::InitialDelay(-1.0));
    }

    #[test]
    fn error_display_names_argument_and_value() {
        let msg = PolicyError::BackoffFactor(0.0).to_string();
        assert!(msg.contains("Invalid backoff_factor: 0"), "{msg}");
        assert!(
            msg.contains("backoff_factor must be a finite number"),
            "{msg}"
        );
    }

    #[test]
    fn retry_decision() {
        let p = Policy::new(None, 2, 1.0, 2.0).unwrap();
        assert!(p.may_retry(0, true));
        assert!(p.may_retry(1, true));
        assert!(!p.may_retry(2, true));
        assert!(!p.may_retry(0, false));
        assert!(!Policy::default().may_retry(0, true));
    }

    #[test]
    fn bounds_follow_the_formula() {
        let p = Policy::new(Some(5.0), 3, 0.5, 2.0).unwrap();
        assert_eq!(p.delay_bounds(0), (0.25, 0.5));
        assert_eq!(p.delay_bounds(1), (0.5, 1.0));
        assert_eq!(p.delay_bounds(2), (1.0, 2.0));
        let shrinking = Policy::new(None, 3, 1.0, 0.5).unwrap();
        assert_eq!(shrinking.delay_bounds(2), (0.125, 0.25));
    }

    #[test]
    fn delays_stay_in_bounds_and_are_reproducible() {
        let p = Policy::new(None, 10, 0.3, 1.7).unwrap();
        let mut a = SmallRng::seed_from_u64(7);
        let mut b = SmallRng::seed_from_u64(7);
        for k in 0..10 {
            let (lo, hi) = p.delay_bounds(k);
            let d = p.delay(k, &mut a);
            assert!(lo <= d && d <= hi, "{lo} <= {d} <= {hi}");
            assert_eq!(d, p.delay(k, &mut b));
        }
    }

    #[test]
    fn max_delay_caps_before_the_jitter() {
        let p = Policy::new(None, 10, 1.0, 2.0)
            .unwrap()
            .with_max_delay(Some(3.0))
            .unwrap();
        assert_eq!(p.max_delay(), Some(3.0));
        assert_eq!(p.delay_bounds(0), (0.5, 1.0));
        assert_eq!(p.delay_bounds(1), (1.0, 2.0));
        assert_eq!(p.delay_bounds(2), (1.5, 3.0));
        assert_eq!(p.delay_bounds(9), (1.5, 3.0));
        // the same draw as without the cap, scaled by the capped base
        let uncapped = Policy::new(None, 10, 1.0, 2.0).unwrap();
        let mut a = SmallRng::seed_from_u64(11);
        let mut b = SmallRng::seed_from_u64(11);
        for k in 0..10 {
            let jitter = uncapped.delay(k, &mut a) / uncapped.base_delay(k);
            let d = p.delay(k, &mut b);
            let expect = uncapped.base_delay(k).min(3.0) * jitter;
            assert!(
                (d - expect).abs() <= 1e-12 * expect.max(1.0),
                "{k}: {d} vs {expect}"
            );
        }
        let zero = uncapped.with_max_delay(Some(0.0)).unwrap();
        assert_eq!(zero.delay(4, &mut a), 0.0);
        let inf = uncapped.with_max_delay(Some(f64::INFINITY)).unwrap();
        assert_eq!(inf.delay_bounds(3), uncapped.delay_bounds(3));
    }

    #[test]
    fn max_delay_validation() {
        for bad in [-1e-9, -1.0, f64::NAN, f64::NEG_INFINITY] {
            let err = Policy::default().with_max_delay(Some(bad)).unwrap_err();
            assert!(matches!(err, PolicyError::MaxDelay(_)), "{bad}");
            assert!(err.to_string().contains("Invalid max_delay"), "{err}");
        }
        assert!(Policy::default().with_max_delay(None).is_ok());
        assert!(Policy::default().with_max_delay(Some(0.0)).is_ok());
    }

    #[test]
    fn hinted_delays_are_capped_and_checked() {
        let p = Policy::default().with_retry_after(true);
        assert!(p.retry_after());
        assert_eq!(p.hinted_delay(7.5), Some(7.5));
        assert_eq!(p.hinted_delay(0.0), Some(0.0));
        assert_eq!(p.hinted_delay(-0.1), None);
        assert_eq!(p.hinted_delay(f64::NAN), None);
        assert_eq!(p.hinted_delay(f64::INFINITY), None);
        let capped = p.with_max_delay(Some(2.0)).unwrap();
        assert_eq!(capped.hinted_delay(7.5), Some(2.0));
        assert_eq!(capped.hinted_delay(1.5), Some(1.5));
        assert_eq!(capped.hinted_delay(f64::INFINITY), Some(2.0));
        assert_eq!(capped.hinted_delay(-1.0), None);
    }

    #[test]
    fn huge_exponents_saturate() {
        let p = Policy::new(None, u32::MAX, f64::MAX, f64::MAX).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        for k in [1, 2, 1000, i32::MAX as u32, u32::MAX] {
            let (lo, hi) = p.delay_bounds(k);
            assert_eq!(hi, f64::MAX);
            assert!(lo.is_finite());
            let d = p.delay(k, &mut rng);
            assert!(d.is_finite() && d >= lo);
        }
        let tiny = Policy::new(None, u32::MAX, 1e-300, 1e-300).unwrap();
        assert_eq!(tiny.delay_bounds(u32::MAX), (0.0, 0.0));
        assert_eq!(tiny.delay(u32::MAX, &mut rng), 0.0);
        let zero = Policy::new(None, u32::MAX, 0.0, f64::MAX).unwrap();
        assert_eq!(zero.delay_bounds(u32::MAX), (0.0, 0.0));
        assert_eq!(zero.delay(5, &mut rng), 0.0);
    }
}
