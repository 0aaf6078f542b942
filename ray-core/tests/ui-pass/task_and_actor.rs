//! A task and an actor with the shapes `#[remote]` supports compile, and
//! their generated stubs type-check at the call site.

use ray_core::prelude::*;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Point {
    x: f64,
    y: f64,
}

#[remote]
fn norm(p: Point) -> f64 {
    (p.x * p.x + p.y * p.y).sqrt()
}

#[remote]
fn checked_div(a: u64, b: u64) -> Result<u64, String> {
    a.checked_div(b)
        .ok_or_else(|| format!("cannot divide {a} by zero"))
}

#[remote]
async fn twice(x: u64) -> u64 {
    x * 2
}

#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Counter {
    fn new(start: u64) -> Self {
        Counter { n: start }
    }

    fn incr(&mut self, by: u64) -> u64 {
        self.n += by;
        self.n
    }

    fn value(&self) -> u64 {
        self.n
    }
}

#[allow(dead_code)]
fn call_sites(ray: &Ray) -> ray_core::Result<()> {
    let p: ObjectRef<f64> = norm::remote(ray, Point { x: 3.0, y: 4.0 })?;
    let q: ObjectRef<u64> = checked_div::options().num_cpus(1.0).remote(ray, 6, 3)?;
    let _: ObjectRef<u64> = twice::remote(ray, q)?;
    let counter: ActorHandle<Counter> = Counter::remote(ray, 0)?;
    let _: ObjectRef<u64> = counter.incr(1)?;
    let _: ObjectRef<u64> = counter.value()?;
    drop(p);
    Ok(())
}

fn main() {}
