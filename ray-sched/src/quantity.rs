//! Exact fixed-point resource amounts.
//!
//! Ray lets tasks ask for fractions of a resource (`num_gpus=0.5`). Summing
//! and subtracting such fractions as `f64` drifts (`0.1 + 0.2 != 0.3`), and a
//! node whose `used` ends at `1e-17` instead of `0` looks busy forever. A
//! [`Quantity`] is an integer count of 1/10 000ths, so every acquire has an
//! exact matching release.

use std::fmt;

use crate::error::SchedError;

/// The largest amount, in whole units, that [`Quantity::from_f64`] accepts.
///
/// Above it an `f64` no longer resolves 1/10 000 of a unit exactly; larger
/// amounts (memory in bytes on a machine with more than 1 TB, say) must be
/// built with [`Quantity::from_units`] or [`Quantity::from_raw`].
pub const MAX_UNITS: f64 = 1e12;

/// An amount of a resource: a non-negative fixed-point number with a
/// resolution of 1/10 000 ([`Quantity::SCALE`]).
///
/// Arithmetic is exact; use [`Quantity::checked_add`] and
/// [`Quantity::saturating_sub`] rather than floats.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Quantity(u64);

impl Quantity {
    /// Number of raw steps in one whole unit.
    pub const SCALE: u64 = 10_000;
    /// No amount at all.
    pub const ZERO: Quantity = Quantity(0);
    /// One whole unit.
    pub const ONE: Quantity = Quantity(Self::SCALE);
    /// The largest representable amount; arithmetic saturates here.
    pub const MAX: Quantity = Quantity(u64::MAX);

    /// Converts a float, rounding to the nearest 1/10 000.
    ///
    /// # Errors
    /// [`SchedError::InvalidQuantity`] if `x` is NaN, infinite, negative, or
    /// larger than [`MAX_UNITS`].
    pub fn from_f64(x: f64) -> Result<Quantity, SchedError> {
        if !x.is_finite() || !(0.0..=MAX_UNITS).contains(&x) {
            return Err(SchedError::InvalidQuantity { value: x });
        }
        // In range by the check above: at most 1e16 < u64::MAX.
        Ok(Quantity((x * Self::SCALE as f64).round() as u64))
    }

    /// `whole` units exactly (`from_units(3)` is 3.0); saturates at [`Quantity::MAX`].
    pub const fn from_units(whole: u64) -> Quantity {
        Quantity(whole.saturating_mul(Self::SCALE))
    }

    /// The amount `raw / SCALE`, given in 1/10 000ths.
    pub const fn from_raw(raw: u64) -> Quantity {
        Quantity(raw)
    }

    /// The amount in 1/10 000ths.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The amount as a float (for display and for APIs that speak floats).
    pub fn to_f64(self) -> f64 {
        // Whole and fractional parts separately keep large amounts accurate.
        (self.0 / Self::SCALE) as f64 + (self.0 % Self::SCALE) as f64 / Self::SCALE as f64
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        self.0.checked_add(other.0).map(Quantity)
    }

    /// `self + other`, clamped to [`Quantity::MAX`].
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(other.0))
    }

    /// `self - other`, clamped to zero.
    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(other.0))
    }

    /// Whether this is no amount at all.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The smallest whole number of units that covers this amount (0.5 → 1, 2.0 → 2).
    pub fn ceil_units(self) -> u64 {
        self.0.div_ceil(Self::SCALE)
    }
}

impl fmt::Display for Quantity {
    /// Shortest exact decimal: `2`, `0.5`, `0.0001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / Self::SCALE;
        let frac = self.0 % Self::SCALE;
        let digits = [frac / 1000, frac / 100 % 10, frac / 10 % 10, frac % 10];
        let Some(last) = digits.iter().rposition(|d| *d != 0) else {
            return write!(f, "{whole}");
        };
        write!(f, "{whole}.")?;
        digits[..=last].iter().try_for_each(|d| write!(f, "{d}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_f64_rounds_to_nearest_ten_thousandth() {
        assert_eq!(Quantity::from_f64(0.5).unwrap().raw(), 5_000);
        assert_eq!(Quantity::from_f64(0.1).unwrap().raw(), 1_000);
        assert_eq!(Quantity::from_f64(0.00004).unwrap(), Quantity::ZERO);
        assert_eq!(Quantity::from_f64(0.00005).unwrap().raw(), 1);
        assert_eq!(Quantity::from_f64(1.0 / 3.0).unwrap().raw(), 3_333);
        assert_eq!(Quantity::from_f64(-0.0).unwrap(), Quantity::ZERO);
        assert_eq!(
            Quantity::from_f64(MAX_UNITS).unwrap(),
            Quantity::from_units(1_000_000_000_000)
        );
    }

    #[test]
    fn from_f64_rejects_nan_negative_infinite_and_huge() {
        for bad in [
            f64::NAN,
            -1.0,
            -1e-9,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.1e12,
        ] {
            let err = Quantity::from_f64(bad).unwrap_err();
            assert!(matches!(err, SchedError::InvalidQuantity { .. }), "{bad}");
            assert!(
                err.to_string().starts_with("invalid resource quantity"),
                "{err}"
            );
        }
        let err = Quantity::from_f64(-2.5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid resource quantity -2.5: must be a finite, non-negative number no larger than 1e12"
        );
        // A huge amount is written short, not in three hundred digits.
        let err = Quantity::from_f64(1e300).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid resource quantity 1e300: "),
            "{err}"
        );
    }

    #[test]
    fn display_is_the_shortest_exact_decimal() {
        assert_eq!(Quantity::from_f64(0.5).unwrap().to_string(), "0.5");
        assert_eq!(Quantity::from_units(2).to_string(), "2");
        assert_eq!(Quantity::from_raw(1).to_string(), "0.0001");
        assert_eq!(Quantity::from_raw(12_3450).to_string(), "12.345");
        assert_eq!(Quantity::from_raw(10_010).to_string(), "1.001");
        assert_eq!(Quantity::ZERO.to_string(), "0");
    }

    #[test]
    fn ceil_units_rounds_fractions_up() {
        assert_eq!(Quantity::from_f64(0.5).unwrap().ceil_units(), 1);
        assert_eq!(Quantity::from_units(2).ceil_units(), 2);
        assert_eq!(Quantity::from_raw(20_001).ceil_units(), 3);
        assert_eq!(Quantity::ZERO.ceil_units(), 0);
    }

    #[test]
    fn arithmetic_is_exact_and_bounded() {
        let tenth = Quantity::from_f64(0.1).unwrap();
        let sum = tenth.checked_add(Quantity::from_f64(0.2).unwrap()).unwrap();
        assert_eq!(sum, Quantity::from_f64(0.3).unwrap());
        assert_eq!(Quantity::MAX.checked_add(Quantity::from_raw(1)), None);
        assert_eq!(Quantity::MAX.saturating_add(Quantity::ONE), Quantity::MAX);
        assert_eq!(tenth.saturating_sub(Quantity::ONE), Quantity::ZERO);
        assert!(Quantity::ZERO.is_zero() && !tenth.is_zero());
        assert_eq!(Quantity::from_units(u64::MAX), Quantity::MAX);
        assert_eq!(Quantity::from_raw(12_345).to_f64(), 1.2345);
    }
}
