//! Attempt policies: validation, retry decision and jittered backoff delays.

use std::fmt;

use rand::Rng;

/// A validated attempt policy (SPEC 2.2), without the exception set (that is Python's).
///
/// `retries` counts additional attempts: a job runs at most `1 + retries` times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    timeout: Option<f64>,
    retries: u32,
    initial_delay: f64,
    backoff_factor: f64,
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
}

impl PolicyError {
    /// The argument the error is about.
    pub fn argument(&self) -> &'static str {
        match self {
            PolicyError::Timeout(_) => "timeout",
            PolicyError::InitialDelay(_) => "initial_delay",
            PolicyError::BackoffFactor(_) => "backoff_factor",
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
        }
    }

    /// The refused value.
    pub fn value(&self) -> f64 {
        match *self {
            PolicyError::Timeout(v)
            | PolicyError::InitialDelay(v)
            | PolicyError::BackoffFactor(v) => v,
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
        })
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

    /// `(low, high)` of the wait before retry `retry` (0-based): `(base / 2, base)`.
    pub fn delay_bounds(&self, retry: u32) -> (f64, f64) {
        let base = self.base_delay(retry);
        (base * 0.5, base)
    }

    /// The jittered wait before retry `retry` (0-based):
    /// `initial_delay * backoff_factor ** retry * U(0.5, 1.0)`, within [`Policy::delay_bounds`].
    pub fn delay<R: Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> f64 {
        let base = self.base_delay(retry);
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
