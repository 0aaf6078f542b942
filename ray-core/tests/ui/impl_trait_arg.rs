use ray_core::prelude::*;

#[remote]
fn total(xs: impl IntoIterator<Item = u64>) -> u64 {
    xs.into_iter().sum()
}

fn main() {}
