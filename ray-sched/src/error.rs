//! The error type of ray-sched.

use thiserror::Error;

use crate::quantity::MAX_UNITS;

/// What went wrong in a ray-sched operation.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SchedError {
    /// A resource amount given as a float cannot be represented as a
    /// [`Quantity`](crate::Quantity): it is NaN, infinite, negative, or larger
    /// than the largest amount a float can carry exactly to 1/10 000.
    #[error(
        "invalid resource quantity {value}: must be a finite, non-negative number \
         no larger than {MAX_UNITS}"
    )]
    InvalidQuantity {
        /// The rejected value.
        value: f64,
    },
}
