//! Resource accounting of one node.

use crate::resources::ResourceSet;

/// What one node has (`total`) and what running work holds (`used`).
///
/// `used` never exceeds `total` through [`NodeResources::try_acquire`];
/// only [`NodeResources::acquire_forced`] may push it past, temporarily.
#[derive(Clone, Debug)]
pub struct NodeResources {
    total: ResourceSet,
    used: ResourceSet,
}

impl NodeResources {
    /// A node with `total` resources, none in use.
    pub fn new(total: ResourceSet) -> Self {
        Self {
            total,
            used: ResourceSet::new(),
        }
    }

    /// Everything the node has.
    pub fn total(&self) -> &ResourceSet {
        &self.total
    }

    /// What running work holds now.
    pub fn used(&self) -> &ResourceSet {
        &self.used
    }

    /// `total - used`, each amount clamped at zero (used may exceed total
    /// after [`NodeResources::acquire_forced`]).
    pub fn available(&self) -> ResourceSet {
        let mut available = self.total.clone();
        available.sub_saturating(&self.used);
        available
    }

    /// Whether `req` could ever fit on this node: `req ⊆ total`.
    pub fn is_feasible(&self, req: &ResourceSet) -> bool {
        req.is_subset_of(&self.total)
    }

    /// Whether `req` fits now: `used + req ≤ total`.
    pub fn can_acquire(&self, req: &ResourceSet) -> bool {
        req.fits_on_top_of(&self.used, &self.total)
    }

    /// Takes `req` if it fits now; returns whether it did.
    pub fn try_acquire(&mut self, req: &ResourceSet) -> bool {
        let fits = self.can_acquire(req);
        if fits {
            self.used.add_assign(req);
        }
        fits
    }

    /// Takes `req` without checking. For a task that gave its resources back
    /// while blocked (in `get`) and now resumes: `used` may exceed `total`
    /// until something is released.
    pub fn acquire_forced(&mut self, req: &ResourceSet) {
        self.used.add_assign(req);
    }

    /// Gives `req` back; amounts never go below zero.
    pub fn release(&mut self, req: &ResourceSet) {
        self.used.sub_saturating(req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::resources::GPU;

    fn q(x: f64) -> Quantity {
        Quantity::from_f64(x).unwrap()
    }

    #[test]
    fn try_acquire_refuses_to_overcommit() {
        let mut node = NodeResources::new(ResourceSet::cpu(q(2.0)).with(GPU, q(1.0)));
        let half_gpu = ResourceSet::cpu(q(1.0)).with(GPU, q(0.5));
        assert!(node.try_acquire(&half_gpu));
        assert!(node.try_acquire(&half_gpu));
        assert!(!node.try_acquire(&ResourceSet::new().with(GPU, q(0.0001))));
        assert_eq!(node.used(), node.total());
        assert!(node.available().is_empty());
    }

    #[test]
    fn feasible_means_fits_an_empty_node_not_fits_now() {
        let mut node = NodeResources::new(ResourceSet::cpu(q(2.0)));
        assert!(node.try_acquire(&ResourceSet::cpu(q(2.0))));
        let one = ResourceSet::cpu(q(1.0));
        assert!(node.is_feasible(&one));
        assert!(!node.can_acquire(&one));
        assert!(!node.is_feasible(&ResourceSet::cpu(q(3.0))));
        assert!(!node.is_feasible(&ResourceSet::new().with("tpu", q(1.0))));
    }

    #[test]
    fn acquire_forced_may_exceed_total_and_available_saturates() {
        let mut node = NodeResources::new(ResourceSet::cpu(q(1.0)));
        let one = ResourceSet::cpu(q(1.0));
        assert!(node.try_acquire(&one));
        node.acquire_forced(&one);
        assert_eq!(node.used().get("CPU"), q(2.0));
        assert!(node.available().is_empty());
        assert!(!node.can_acquire(&ResourceSet::cpu(q(0.1))));
        node.release(&one);
        assert!(!node.can_acquire(&ResourceSet::cpu(q(0.1))));
        node.release(&one);
        assert!(node.can_acquire(&one));
    }

    #[test]
    fn release_never_goes_below_zero() {
        let mut node = NodeResources::new(ResourceSet::cpu(q(4.0)));
        assert!(node.try_acquire(&ResourceSet::cpu(q(1.0))));
        node.release(&ResourceSet::cpu(q(3.0)).with("tpu", q(1.0)));
        assert!(node.used().is_empty());
        assert_eq!(node.available(), ResourceSet::cpu(q(4.0)));
    }
}
