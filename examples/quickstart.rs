//! The quickstart of DESIGN.md: a remote function, an object passed by
//! reference, and an actor created with options and called.
//!
//! `cargo run --release --example quickstart`

use ray_core::prelude::*;

/// Adds two vectors element by element, as a task.
#[remote]
fn add(a: Vec<f64>, b: Vec<f64>) -> Vec<f64> {
    a.iter().zip(&b).map(|(x, y)| x + y).collect()
}

/// A counter that lives in an actor.
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
}

#[tokio::main]
async fn main() -> ray_core::Result<()> {
    let ray = ray_core::init().await?; // embedded: no address, nothing to start
    let x = ray.put(vec![1.0; 1 << 20]).await?; // ObjectRef<Vec<f64>>
    let s = add::remote(&ray, x.clone(), x)?; // args: values or ObjectRefs
    let v: Vec<f64> = s.get().await?; // or get_archived() for a zero-copy view
    println!(
        "add: {} elements, first {}, sum {}",
        v.len(),
        v[0],
        v.iter().sum::<f64>()
    );
    let c = Counter::options().num_cpus(0.5).remote(&ray, 0)?;
    let n = c.incr(5)?.get().await?;
    println!("counter after incr(5): {n}");
    ray.shutdown();
    Ok(())
}
