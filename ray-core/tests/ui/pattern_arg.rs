use ray_core::prelude::*;

#[remote]
fn add_pair((a, b): (u8, u8)) -> u8 {
    a + b
}

fn main() {}
