use ray_core::prelude::*;

#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Counter {
    fn value(&self) -> u64 {
        self.n
    }
}

fn main() {}
