//! Resource sets in the wire form of ray-proto's messages.

use ray_proto::wire::ResourceAmount;

use crate::{Quantity, ResourceSet};

/// `resources` in wire form.
pub fn resources_to_wire(resources: &ResourceSet) -> Vec<ResourceAmount> {
    resources
        .iter()
        .map(|(name, q)| ResourceAmount {
            name: name.to_owned(),
            raw: q.raw(),
        })
        .collect()
}

/// The [`ResourceSet`] a wire list describes.
pub fn resources_from_wire(amounts: &[ResourceAmount]) -> ResourceSet {
    let mut set = ResourceSet::new();
    for a in amounts {
        set.set(&a.name, Quantity::from_raw(a.raw));
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_round_trip_through_wire_form() {
        let set =
            ResourceSet::cpu(Quantity::from_units(4)).with("gpu-a", Quantity::from_raw(5_000));
        assert_eq!(resources_from_wire(&resources_to_wire(&set)), set);
    }
}
