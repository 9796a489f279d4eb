//! Property tests: numbers are read exactly over their whole range
//! (docs/contract.md#hostile-bindings). Whatever its size, a negative integer is negative,
//! and every rule about numbers refuses it wherever it refuses `-1`.

use proptest::prelude::*;
use sdax_core::{Number, Policy, PolicyError};

/// The magnitude of an integer beyond `i64`, rounded to a float: from `2**63` up, or past
/// the float range (`None`).
fn big_magnitude() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        Just(None),
        (63i32..1024).prop_map(|e| Some(2f64.powi(e))),
        (9.3e18f64..f64::MAX).prop_map(Some),
        Just(Some(f64::MAX)),
    ]
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<f64>().prop_map(Number::Float),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0)
        ]
        .prop_map(Number::Float),
        any::<i64>().prop_map(Number::Int),
        prop_oneof![Just(i64::MIN), Just(-1i64), Just(0i64), Just(i64::MAX)].prop_map(Number::Int),
        (any::<bool>(), big_magnitude()).prop_map(|(negative, magnitude)| Number::Big {
            negative,
            magnitude
        }),
    ]
}

/// Below zero, as Python compares it with `0` (`-0.0` is not; NaN is not).
fn negative(n: Number) -> bool {
    match n {
        Number::Float(v) => v < 0.0,
        Number::Int(i) => i < 0,
        Number::Big { negative, .. } => negative,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn the_sign_is_kept_over_the_whole_range(n in number()) {
        let v = n.to_f64();
        if negative(n) {
            prop_assert!(v < 0.0, "{n:?} read as {v}");
        } else if !matches!(n, Number::Float(f) if f.is_nan()) {
            prop_assert!(v >= 0.0, "{n:?} read as {v}");
        }
    }

    #[test]
    fn integers_read_as_python_reads_them(i in any::<i64>(), negative in any::<bool>(),
                                          magnitude in big_magnitude()) {
        prop_assert_eq!(Number::Int(i).to_f64(), i as f64);
        let big = Number::Big { negative, magnitude };
        let expected = magnitude.unwrap_or(f64::INFINITY);
        prop_assert_eq!(big.to_f64(), if negative { -expected } else { expected });
    }

    #[test]
    fn integers_keep_their_order(a in any::<i64>(), b in any::<i64>()) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(Number::Int(lo).to_f64() <= Number::Int(hi).to_f64());
        let below = Number::Big { negative: true, magnitude: None }.to_f64();
        let above = Number::Big { negative: false, magnitude: None }.to_f64();
        prop_assert!(below <= Number::Int(lo).to_f64() && Number::Int(hi).to_f64() <= above);
    }

    #[test]
    fn every_negative_number_is_refused_where_minus_one_is(n in number()) {
        let v = n.to_f64();
        let nan = v.is_nan();
        if negative(n) || nan {
            prop_assert!(matches!(
                Policy::default().with_max_delay(Some(v)),
                Err(PolicyError::MaxDelay(_))
            ));
            prop_assert!(Policy::new(Some(v), 0, 1.0, 2.0).is_err());
            prop_assert!(Policy::new(None, 0, v, 2.0).is_err());
            prop_assert!(Policy::new(None, 0, 1.0, v).is_err());
            prop_assert_eq!(Policy::default().hinted_delay(v), None);
            let capped = Policy::default().with_max_delay(Some(5.0)).unwrap();
            prop_assert_eq!(capped.hinted_delay(v), None);
        } else {
            prop_assert!(Policy::default().with_max_delay(Some(v)).is_ok());
            let capped = Policy::default().with_max_delay(Some(5.0)).unwrap();
            prop_assert_eq!(capped.hinted_delay(v), Some(v.min(5.0)));
        }
    }

    #[test]
    fn counts_are_nonnegative_integers_saturating(n in number()) {
        match (n, n.saturating_count()) {
            (Number::Float(_), count) => prop_assert_eq!(count, None),
            (n, None) => prop_assert!(negative(n)),
            (Number::Int(i), Some(c)) => {
                prop_assert!(i >= 0);
                prop_assert_eq!(u64::from(c), (i as u64).min(u64::from(u32::MAX)));
            }
            (Number::Big { negative, .. }, Some(c)) => {
                prop_assert!(!negative);
                prop_assert_eq!(c, u32::MAX);
            }
        }
    }
}
