use ray_core::prelude::*;

#[remote(foo)]
fn ping() -> u8 {
    1
}

fn main() {}
