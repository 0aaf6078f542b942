//! The program that really deadlocks: two actors calling each other
//! synchronously. `left.ping(right, left)` holds Left while it waits for
//! `right.pong(left)`, which waits for `left.echo()`, queued behind `ping`
//! on the one-call-at-a-time Left. Shared by the deadlock tests (embedded,
//! across two nodes, and in the browser).
//!
//! The actors register through `#[remote]` like any user's: a test binary
//! that uses them finds them in its registry, and so do the worker
//! processes that run that binary.

// `new` is each actor's constructor (`Left::remote(&ray)`), not a value
// a `Default` could stand for.
#![allow(clippy::new_without_default)]

use ray_core::prelude::*;

/// The actor that calls first and holds itself while it waits.
#[remote]
pub struct Left {}

#[remote]
impl Left {
    /// A new Left.
    pub fn new() -> Self {
        Left {}
    }

    /// Calls `right.pong(me)` and waits for it, holding this actor meanwhile.
    pub fn ping(&self, right: ActorHandle<Right>, me: ActorHandle<Left>) -> u64 {
        right
            .pong(me)
            .and_then(|r| r.get_blocking())
            .map_or(0, |v| v + 1)
    }

    /// Queued behind `ping` on this one-call-at-a-time actor: never starts.
    pub fn echo(&self) -> u64 {
        1
    }

    /// The node this actor lives on.
    pub fn node(&self) -> u64 {
        Ray::current().expect("in an actor").node_id().0
    }
}

/// The actor that calls back into Left and waits.
#[remote]
pub struct Right {}

#[remote]
impl Right {
    /// A new Right.
    pub fn new() -> Self {
        Right {}
    }

    /// Calls back into the caller's actor and waits: the cycle closes.
    pub fn pong(&self, left: ActorHandle<Left>) -> u64 {
        left.echo()
            .and_then(|r| r.get_blocking())
            .map_or(0, |v| v + 1)
    }

    /// The node this actor lives on.
    pub fn node(&self) -> u64 {
        Ray::current().expect("in an actor").node_id().0
    }
}
