//! Named resource amounts: what a task asks for and what a node has.

use std::cmp::Ordering;
use std::fmt;
use std::iter::FusedIterator;
use std::sync::Arc;

use crate::quantity::Quantity;

/// Name of the CPU resource.
pub const CPU: &str = "CPU";
/// Name of the GPU resource.
pub const GPU: &str = "GPU";
/// Name of the memory resource.
pub const MEMORY: &str = "memory";

/// A set of named resource amounts (`{CPU: 1, GPU: 0.5, my_tpu: 2}`).
///
/// Zero amounts are not stored, so two sets that hold the same non-zero
/// amounts are equal and hash alike however they were built.
///
/// CPU, GPU and memory live in fixed fields; only custom names go to the
/// heap. Cloning, comparing and hashing a set without custom resources never
/// allocates, which matters because the runtime clones one per submitted task.
#[derive(Clone, PartialEq, Eq, Hash, Default, Debug)]
pub struct ResourceSet {
    cpu: Quantity,
    gpu: Quantity,
    memory: Quantity,
    /// Sorted by name, no duplicates, no zero amounts, never a built-in name.
    /// An empty boxed slice does not allocate.
    custom: Box<[(Arc<str>, Quantity)]>,
}

impl ResourceSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding only `q` CPUs.
    pub fn cpu(q: Quantity) -> Self {
        Self {
            cpu: q,
            ..Self::default()
        }
    }

    /// Builder form of [`ResourceSet::set`]: `self` with `name` set to `q`
    /// (a zero `q` removes `name`).
    #[must_use]
    pub fn with(mut self, name: &str, q: Quantity) -> Self {
        self.set(name, q);
        self
    }

    /// Sets the amount of `name` to `q`; a zero `q` removes `name`.
    pub fn set(&mut self, name: &str, q: Quantity) {
        if let Some(slot) = self.builtin_mut(name) {
            *slot = q;
            return;
        }
        match self.custom_index(name) {
            Ok(i) if q.is_zero() => {
                let mut v = std::mem::take(&mut self.custom).into_vec();
                v.remove(i);
                self.custom = v.into_boxed_slice();
            }
            Ok(i) => self.custom[i].1 = q,
            Err(_) if q.is_zero() => {}
            Err(i) => {
                let mut v = std::mem::take(&mut self.custom).into_vec();
                v.insert(i, (Arc::from(name), q));
                self.custom = v.into_boxed_slice();
            }
        }
    }

    /// The amount of `name`; zero if absent.
    pub fn get(&self, name: &str) -> Quantity {
        match name {
            CPU => self.cpu,
            GPU => self.gpu,
            MEMORY => self.memory,
            _ => self.custom_get(name),
        }
    }

    /// The non-zero amounts, sorted by name (byte order), so iteration is
    /// deterministic.
    pub fn iter(&self) -> ResourceIter<'_> {
        ResourceIter {
            builtin: [(CPU, self.cpu), (GPU, self.gpu), (MEMORY, self.memory)],
            next_builtin: 0,
            custom: &self.custom,
        }
    }

    /// Whether no amount is stored.
    pub fn is_empty(&self) -> bool {
        self.cpu.is_zero() && self.gpu.is_zero() && self.memory.is_zero() && self.custom.is_empty()
    }

    /// Whether `self` and `other` both ask for some resource (a non-zero
    /// amount of the same name), so granting one can leave less for the
    /// other.
    pub fn overlaps(&self, other: &ResourceSet) -> bool {
        let both = |a: Quantity, b: Quantity| !a.is_zero() && !b.is_zero();
        both(self.cpu, other.cpu)
            || both(self.gpu, other.gpu)
            || both(self.memory, other.memory)
            || self
                .custom
                .iter()
                .any(|(name, _)| !other.custom_get(name).is_zero())
    }

    /// Whether every amount in `self` is at most the same amount in `other`.
    pub fn is_subset_of(&self, other: &ResourceSet) -> bool {
        self.cpu <= other.cpu
            && self.gpu <= other.gpu
            && self.memory <= other.memory
            && self
                .custom
                .iter()
                .all(|(name, q)| *q <= other.custom_get(name))
    }

    /// Adds `other` into `self`, amount by amount, saturating at [`Quantity::MAX`].
    pub fn add_assign(&mut self, other: &ResourceSet) {
        self.combine(other, Quantity::saturating_add);
    }

    /// Subtracts `other` from `self`, amount by amount, never going below zero.
    pub fn sub_saturating(&mut self, other: &ResourceSet) {
        self.combine(other, Quantity::saturating_sub);
    }

    /// Whether `used + self <= total` for every amount in `self`, without
    /// building the sum.
    pub(crate) fn fits_on_top_of(&self, used: &ResourceSet, total: &ResourceSet) -> bool {
        let fits = |req: Quantity, used: Quantity, total: Quantity| {
            req.is_zero() || used.checked_add(req).is_some_and(|sum| sum <= total)
        };
        fits(self.cpu, used.cpu, total.cpu)
            && fits(self.gpu, used.gpu, total.gpu)
            && fits(self.memory, used.memory, total.memory)
            && self
                .custom
                .iter()
                .all(|(name, q)| fits(*q, used.custom_get(name), total.custom_get(name)))
    }

    /// Applies `op` amount by amount; `op(x, ZERO)` must be `x`, so names
    /// absent from `other` are left alone.
    fn combine(&mut self, other: &ResourceSet, op: fn(Quantity, Quantity) -> Quantity) {
        self.cpu = op(self.cpu, other.cpu);
        self.gpu = op(self.gpu, other.gpu);
        self.memory = op(self.memory, other.memory);
        if other.custom.is_empty() {
            return;
        }
        // Common case: every name of `other` is already here; update in place.
        let mut in_place = true;
        for (name, q) in other.custom.iter() {
            match self.custom_index(name) {
                Ok(i) => self.custom[i].1 = op(self.custom[i].1, *q),
                Err(_) if op(Quantity::ZERO, *q).is_zero() => {}
                Err(_) => in_place = false,
            }
        }
        if in_place {
            if self.custom.iter().any(|(_, q)| q.is_zero()) {
                let mut v = std::mem::take(&mut self.custom).into_vec();
                v.retain(|(_, q)| !q.is_zero());
                self.custom = v.into_boxed_slice();
            }
            return;
        }
        // Names of `other` already combined above stay as they are; merge in
        // the missing ones.
        let mut merged = Vec::with_capacity(self.custom.len() + other.custom.len());
        let (mut a, mut b) = (
            self.custom.iter().peekable(),
            other.custom.iter().peekable(),
        );
        loop {
            let order = match (a.peek(), b.peek()) {
                (Some((x, _)), Some((y, _))) => x.cmp(y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => break,
            };
            match order {
                Ordering::Less => merged.extend(a.next().cloned()),
                Ordering::Equal => {
                    merged.extend(a.next().cloned());
                    b.next();
                }
                Ordering::Greater => {
                    let (name, q) = b.next().expect("peeked above");
                    merged.push((Arc::clone(name), op(Quantity::ZERO, *q)));
                }
            }
        }
        merged.retain(|(_, q)| !q.is_zero());
        self.custom = merged.into_boxed_slice();
    }

    /// A summary of which names hold a non-zero amount: one bit each for
    /// CPU, GPU and memory, and one bit per custom name chosen by a hash of
    /// the name (two names may share a bit). If `a` holds a name that `b`
    /// lacks, then usually `a.name_mask() & !b.name_mask() != 0`; if that is
    /// non-zero, `a` certainly holds a name `b` lacks.
    pub(crate) fn name_mask(&self) -> u32 {
        let mut mask = u32::from(!self.cpu.is_zero())
            | u32::from(!self.gpu.is_zero()) << 1
            | u32::from(!self.memory.is_zero()) << 2;
        for (name, _) in self.custom.iter() {
            // FNV-1a over the name's bytes, folded onto bits 3..32.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in name.as_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
            mask |= 1 << (3 + h % 29);
        }
        mask
    }

    fn builtin_mut(&mut self, name: &str) -> Option<&mut Quantity> {
        match name {
            CPU => Some(&mut self.cpu),
            GPU => Some(&mut self.gpu),
            MEMORY => Some(&mut self.memory),
            _ => None,
        }
    }

    fn custom_index(&self, name: &str) -> Result<usize, usize> {
        self.custom.binary_search_by(|(k, _)| (**k).cmp(name))
    }

    fn custom_get(&self, name: &str) -> Quantity {
        self.custom_index(name)
            .map_or(Quantity::ZERO, |i| self.custom[i].1)
    }
}

impl<'a> FromIterator<(&'a str, Quantity)> for ResourceSet {
    /// Collects `(name, amount)` pairs; a later pair for the same name wins.
    fn from_iter<I: IntoIterator<Item = (&'a str, Quantity)>>(iter: I) -> Self {
        let mut set = ResourceSet::new();
        for (name, q) in iter {
            set.set(name, q);
        }
        set
    }
}

impl<'a> IntoIterator for &'a ResourceSet {
    type Item = (&'a str, Quantity);
    type IntoIter = ResourceIter<'a>;

    fn into_iter(self) -> ResourceIter<'a> {
        self.iter()
    }
}

impl fmt::Display for ResourceSet {
    /// `{CPU: 2, GPU: 0.5, custom_x: 1}`; the empty set is `{}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (name, q)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}: {q}")?;
        }
        f.write_str("}")
    }
}

/// Iterator over the non-zero amounts of a [`ResourceSet`], sorted by name;
/// made by [`ResourceSet::iter`].
#[derive(Clone, Debug)]
pub struct ResourceIter<'a> {
    /// Built-in names, already in byte order (`CPU` < `GPU` < `memory`).
    builtin: [(&'static str, Quantity); 3],
    next_builtin: usize,
    custom: &'a [(Arc<str>, Quantity)],
}

impl<'a> Iterator for ResourceIter<'a> {
    type Item = (&'a str, Quantity);

    fn next(&mut self) -> Option<Self::Item> {
        while self
            .builtin
            .get(self.next_builtin)
            .is_some_and(|(_, q)| q.is_zero())
        {
            self.next_builtin += 1;
        }
        let builtin = self.builtin.get(self.next_builtin).copied();
        match (builtin, self.custom.first()) {
            (Some((b, bq)), Some((c, cq))) => {
                if b < &**c {
                    self.next_builtin += 1;
                    Some((b, bq))
                } else {
                    self.custom = &self.custom[1..];
                    Some((c, *cq))
                }
            }
            (Some(b), None) => {
                self.next_builtin += 1;
                Some(b)
            }
            (None, Some((c, cq))) => {
                self.custom = &self.custom[1..];
                Some((c, *cq))
            }
            (None, None) => None,
        }
    }
}

impl FusedIterator for ResourceIter<'_> {}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    use super::*;

    fn q(x: f64) -> Quantity {
        Quantity::from_f64(x).unwrap()
    }

    fn hash_of(set: &ResourceSet) -> u64 {
        let mut h = DefaultHasher::new();
        set.hash(&mut h);
        h.finish()
    }

    #[test]
    fn overlaps_means_both_ask_for_some_resource_of_the_same_name() {
        let cpu = ResourceSet::cpu(q(1.0));
        let gpu = ResourceSet::new().with(GPU, q(0.5));
        let tpu = ResourceSet::new().with("tpu", q(2.0));
        let cpu_tpu = cpu.clone().with("tpu", q(1.0));
        assert!(cpu.overlaps(&cpu_tpu) && cpu_tpu.overlaps(&cpu));
        assert!(tpu.overlaps(&cpu_tpu) && cpu_tpu.overlaps(&tpu));
        assert!(!cpu.overlaps(&gpu) && !gpu.overlaps(&cpu));
        assert!(!cpu.overlaps(&tpu) && !tpu.overlaps(&gpu));
        let nothing = ResourceSet::new();
        assert!(!nothing.overlaps(&cpu_tpu) && !cpu_tpu.overlaps(&nothing));
        assert!(!nothing.overlaps(&nothing));
    }

    #[test]
    fn zero_amounts_are_not_stored() {
        let set = ResourceSet::cpu(q(1.0))
            .with("tpu", q(2.0))
            .with(CPU, Quantity::ZERO)
            .with("tpu", Quantity::ZERO)
            .with("never", Quantity::ZERO);
        assert!(set.is_empty());
        assert_eq!(set, ResourceSet::new());
        assert_eq!(set.iter().count(), 0);
    }

    #[test]
    fn equal_sets_compare_and_hash_alike_whatever_the_build_order() {
        let a = ResourceSet::new()
            .with("zz", q(1.0))
            .with(GPU, q(0.5))
            .with("aa", q(3.0))
            .with(CPU, q(2.0));
        let b: ResourceSet = [("aa", q(3.0)), (CPU, q(2.0)), ("zz", q(1.0)), (GPU, q(0.5))]
            .into_iter()
            .collect();
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_ne!(a, b.clone().with("aa", q(3.0001)));
    }

    #[test]
    fn get_returns_zero_for_absent_names() {
        let set = ResourceSet::cpu(q(2.0)).with("tpu", q(1.5));
        assert_eq!(set.get(CPU), q(2.0));
        assert_eq!(set.get("tpu"), q(1.5));
        assert_eq!(set.get(GPU), Quantity::ZERO);
        assert_eq!(set.get("other"), Quantity::ZERO);
    }

    #[test]
    fn iter_is_sorted_by_name_across_builtin_and_custom_names() {
        let set = ResourceSet::new()
            .with("zeta", q(1.0))
            .with(MEMORY, q(100.0))
            .with("Accel", q(1.0))
            .with("TPU", q(4.0))
            .with(CPU, q(2.0))
            .with("DPU", q(1.0));
        let names: Vec<&str> = set.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["Accel", "CPU", "DPU", "TPU", "memory", "zeta"]);
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn display_lists_amounts_sorted_by_name() {
        let set = ResourceSet::cpu(q(2.0))
            .with(GPU, q(0.5))
            .with("custom_x", q(1.0));
        assert_eq!(set.to_string(), "{CPU: 2, GPU: 0.5, custom_x: 1}");
        assert_eq!(ResourceSet::new().to_string(), "{}");
    }

    #[test]
    fn is_subset_of_compares_every_amount() {
        let total = ResourceSet::cpu(q(4.0))
            .with(GPU, q(1.0))
            .with("tpu", q(2.0));
        assert!(ResourceSet::new().is_subset_of(&total));
        assert!(ResourceSet::cpu(q(4.0))
            .with("tpu", q(2.0))
            .is_subset_of(&total));
        assert!(!ResourceSet::cpu(q(4.0001)).is_subset_of(&total));
        assert!(!ResourceSet::new()
            .with("other", q(0.1))
            .is_subset_of(&total));
        assert!(!ResourceSet::new().with(MEMORY, q(1.0)).is_subset_of(&total));
    }

    #[test]
    fn add_and_sub_merge_custom_names_and_drop_zeros() {
        let mut set = ResourceSet::cpu(q(1.0)).with("b", q(1.0));
        set.add_assign(&ResourceSet::cpu(q(0.5)).with("a", q(2.0)).with("c", q(3.0)));
        assert_eq!(set.to_string(), "{CPU: 1.5, a: 2, b: 1, c: 3}");
        set.add_assign(&ResourceSet::new().with("b", q(0.25)));
        assert_eq!(set.get("b"), q(1.25));
        set.sub_saturating(&ResourceSet::cpu(q(9.0)).with("a", q(2.0)).with("d", q(1.0)));
        assert_eq!(set.to_string(), "{b: 1.25, c: 3}");
        set.sub_saturating(&set.clone());
        assert!(set.is_empty());
        assert_eq!(set, ResourceSet::new());
    }

    #[test]
    fn add_saturates_at_max() {
        let mut set = ResourceSet::cpu(Quantity::MAX).with("x", Quantity::MAX);
        set.add_assign(&ResourceSet::cpu(Quantity::ONE).with("x", Quantity::ONE));
        assert_eq!(set.get(CPU), Quantity::MAX);
        assert_eq!(set.get("x"), Quantity::MAX);
    }

    #[test]
    fn fits_on_top_of_checks_used_plus_request_against_total() {
        let total = ResourceSet::cpu(q(2.0)).with("x", q(1.0));
        let used = ResourceSet::cpu(q(1.5)).with("x", q(0.5));
        assert!(ResourceSet::cpu(q(0.5)).fits_on_top_of(&used, &total));
        assert!(!ResourceSet::cpu(q(0.5001)).fits_on_top_of(&used, &total));
        assert!(ResourceSet::new()
            .with("x", q(0.5))
            .fits_on_top_of(&used, &total));
        assert!(!ResourceSet::new()
            .with("y", q(0.1))
            .fits_on_top_of(&used, &total));
        assert!(ResourceSet::new().fits_on_top_of(&used, &total));
    }
}
