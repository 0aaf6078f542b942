use ray_core::prelude::*;

#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Default for Counter {
    fn default() -> Self {
        Counter { n: 0 }
    }
}

fn main() {}
