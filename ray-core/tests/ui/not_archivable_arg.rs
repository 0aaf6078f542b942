use ray_core::prelude::*;

struct Point {
    x: f64,
    y: f64,
}

#[remote]
fn norm(p: Point) -> f64 {
    (p.x * p.x + p.y * p.y).sqrt()
}

fn main() {}
