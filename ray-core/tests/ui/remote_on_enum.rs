use ray_core::prelude::*;

#[remote]
enum State {
    Idle,
    Busy,
}

fn main() {}
