use ray_core::prelude::*;

struct Holder<T> {
    value: T,
}

#[remote]
impl<T: Clone + Send + Sync + 'static> Holder<T> {
    fn new(value: T) -> Self {
        Holder { value }
    }

    fn get(&self) -> T {
        self.value.clone()
    }
}

fn main() {}
