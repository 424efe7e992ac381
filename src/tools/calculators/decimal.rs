//! Exact decimal arithmetic for the calculators: a JSON number is read as the decimal that was written
//! (its shortest round-trip form), formulas run on exact fractions, and results are rounded half-up.
//!
//! Why: CALCULATORS.md requires round-half-up on the decimal value (Python's `Decimal(repr(x))`), and
//! raw `f64` arithmetic misplaces exact band edges (64 kg / 1.6 m² is 24.999999999999996 in doubles).

use num::{BigInt, BigRational, One, ToPrimitive, Zero};

/// The decimal a JSON number denotes: `1.2` is 12/10, not the nearest binary double.
/// Rust prints `f64` with the shortest digits that round-trip and never in exponent form, which is
/// exactly the decimal the sender wrote (what Python's `repr` gives). Non-finite input (impossible from
/// JSON) maps to zero rather than panicking.
pub(super) fn exact(value: f64) -> BigRational {
    if !value.is_finite() {
        return BigRational::zero();
    }
    let text = format!("{}", value.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((text.as_str(), ""));
    let digits = format!("{whole}{fraction}");
    let Some(numerator) = BigInt::parse_bytes(digits.as_bytes(), 10) else {
        return BigRational::zero();
    };
    let magnitude = BigRational::new(numerator, pow10(fraction.len()));
    if value < 0.0 { -magnitude } else { magnitude }
}

/// An exact fraction `numerator / denominator` of small integers (formula constants such as 1.32).
pub(super) fn ratio(numerator: i64, denominator: i64) -> BigRational {
    BigRational::new(BigInt::from(numerator), BigInt::from(denominator))
}

/// An exact integer.
pub(super) fn integer(value: i64) -> BigRational {
    BigRational::from_integer(BigInt::from(value))
}

/// Round half-up (half away from zero, as `decimal.ROUND_HALF_UP`) to `decimals` places; the result
/// is the count of `10^-decimals` units (so 24.95 at one decimal gives 250).
pub(super) fn round_half_up(value: &BigRational, decimals: usize) -> i64 {
    let scaled = value * BigRational::from_integer(pow10(decimals));
    // `Ratio::round` rounds half-way cases away from zero, never to even.
    let units = scaled.round().to_integer();
    units.to_i64().unwrap_or(if units > BigInt::zero() { i64::MAX } else { i64::MIN })
}

/// Round an `f64` result half-up on its decimal (shortest repr) value, as `Decimal(repr(x))` does.
/// Used where the formula is transcendental (MELD's logarithms) and cannot be evaluated exactly.
pub(super) fn round_repr_half_up(value: f64, decimals: usize) -> i64 {
    round_half_up(&exact(value), decimals)
}

/// The `f64` for a count of `10^-decimals` units: 250 units at one decimal is 25.0. Dividing the exact
/// integer by a power of ten gives the double nearest the decimal, which prints as that decimal.
pub(super) fn from_units(units: i64, decimals: usize) -> f64 {
    let divisor = pow10(decimals).to_f64().unwrap_or(1.0);
    units as f64 / divisor
}

fn pow10(exponent: usize) -> BigInt {
    let ten = BigInt::from(10);
    (0..exponent).fold(BigInt::one(), |acc, _| acc * &ten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_written_decimal_not_the_binary_double() {
        assert_eq!(exact(1.2), ratio(12, 10));
        assert_eq!(exact(0.1) + exact(0.2), ratio(3, 10));
        assert_eq!(exact(-2.5), ratio(-5, 2));
        assert_eq!(exact(64.0), integer(64));
        assert_eq!(exact(0.0000001), ratio(1, 10_000_000));
        assert_eq!(exact(f64::NAN), integer(0));
    }

    #[test]
    fn rounds_half_up_never_to_even() {
        assert_eq!(round_half_up(&ratio(245, 10), 0), 25);
        assert_eq!(round_half_up(&ratio(225, 10), 0), 23);
        assert_eq!(round_half_up(&ratio(2495, 100), 1), 250);
        assert_eq!(round_half_up(&ratio(2494, 100), 1), 249);
        assert_eq!(round_half_up(&ratio(-25, 10), 0), -3);
        // 2.675 is 2.67499999… as a double; its decimal value rounds up.
        assert_eq!(round_repr_half_up(2.675, 2), 268);
        // 1.7472 to the tenth is 1.7 (the OPTN MELD(i) path), never 1.75 -> 1.8.
        assert_eq!(round_repr_half_up(1.7472, 1), 17);
        assert_eq!(from_units(250, 1), 25.0);
        assert_eq!(from_units(249, 1), 24.9);
    }

    #[test]
    fn bmi_trap_is_exact() {
        // 64 kg / (1.60 m)^2: 24.999999999999996 in doubles, exactly 25 as decimals.
        let doubles = std::hint::black_box(64.0) / (1.6_f64 * 1.6);
        assert!(doubles < 25.0, "{doubles}");
        let bmi = exact(64.0) * integer(10_000) / (exact(160.0) * exact(160.0));
        assert_eq!(round_half_up(&bmi, 1), 250);
    }
}
