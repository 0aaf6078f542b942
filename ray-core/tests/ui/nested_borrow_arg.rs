use ray_core::prelude::*;

#[remote]
fn join(words: Vec<&str>) -> String {
    words.concat()
}

fn main() {}
