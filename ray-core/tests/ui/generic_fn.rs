use ray_core::prelude::*;

#[remote]
fn identity<T>(x: T) -> T {
    x
}

fn main() {}
