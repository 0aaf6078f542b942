use ray_core::prelude::*;

#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Counter {
    fn new() -> Self {
        Counter { n: 0 }
    }

    fn remote(&self) -> u64 {
        self.n
    }
}

fn main() {}
