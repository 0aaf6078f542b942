use ray_core::prelude::*;

#[remote]
fn shout(x: &str) -> String {
    x.to_uppercase()
}

fn main() {}
