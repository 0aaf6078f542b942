//! The error type of ray-sched.

use thiserror::Error;

use crate::quantity::MAX_UNITS;

/// A rejected amount as a short number: exponent notation past 10^15
/// (`1e300`, not three hundred digits).
fn show(value: f64) -> String {
    if value.is_finite() && value.abs() >= 1e15 {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// What went wrong in a ray-sched operation.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SchedError {
    /// A resource amount given as a float cannot be represented as a
    /// [`Quantity`](crate::Quantity): it is NaN, infinite, negative, or larger
    /// than the largest amount a float can carry exactly to 1/10 000.
    #[error(
        "invalid resource quantity {}: must be a finite, non-negative number \
         no larger than {MAX_UNITS:e}",
        show(*value)
    )]
    InvalidQuantity {
        /// The rejected value.
        value: f64,
    },
}
