//! Scheduling policies a node daemon decides with, pluggable by name.
//!
//! Every node daemon owns a ray-sched [`NodeScheduler`](ray_sched::NodeScheduler)
//! whose [`Policies`] say, per strategy, where work goes. The standard set
//! is Ray's (hybrid, spread, node affinity, locality). A program supplies
//! its own by registering a [`PolicyFactory`] under a name with
//! [`policy_set!`](crate::policy_set) and naming it when nodes start:
//!
//! - `rayrs start --policies NAME` (in a `rayrs` built with the set
//!   registered: a binary whose `main` calls `rayrs::main()`);
//! - [`LocalClusterConfig::policies`](crate::LocalClusterConfig::policies)
//!   for [`Cluster::local`](crate::Cluster::local), whose node processes
//!   run the program's own binary;
//! - [`NodeConfig::policies`](super::NodeConfig::policies) and
//!   [`HeadConfig::policies`](super::HeadConfig::policies) when a program
//!   assembles nodes itself.
//!
//! ```
//! use ray_core::cluster::{ClusterView, Decision, Policies, Policy, PolicyFactory, Request};
//!
//! /// Everything on the lowest-numbered node that fits.
//! struct FirstFit;
//!
//! impl Policy for FirstFit {
//!     fn name(&self) -> &str {
//!         "first-fit"
//!     }
//!     fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
//!         match view.nodes().iter().find(|n| n.resources().can_acquire(req.resources)) {
//!             Some(n) => Decision::Node(n.id()),
//!             None => Decision::Wait,
//!         }
//!     }
//! }
//!
//! fn first_fit(seed: u64) -> Policies {
//!     Policies::standard(seed).with_default(Box::new(FirstFit))
//! }
//!
//! ray_core::policy_set!("first-fit", first_fit);
//!
//! assert!(ray_core::cluster::policy_set("first-fit").is_some());
//! let _: PolicyFactory = first_fit;
//! ```

use ray_sched::Policies;

/// Makes a node's policies from the seed its randomness starts from.
pub type PolicyFactory = fn(seed: u64) -> Policies;

/// A named [`PolicyFactory`], as [`policy_set!`](crate::policy_set)
/// registers it.
#[derive(Debug)]
pub struct PolicySet {
    /// The name nodes are started with.
    pub name: &'static str,
    /// What makes the policies.
    pub make: PolicyFactory,
}

/// Every policy set the program registered (link-time, like remote
/// functions).
#[linkme::distributed_slice]
pub static POLICY_SETS: [PolicySet];

/// The name of the standard set: Ray's policies.
pub const STANDARD: &str = "standard";

/// The factory registered as `name` (`"standard"`, Ray's policies, is always
/// there).
pub fn policy_set(name: &str) -> Option<PolicyFactory> {
    if name == STANDARD {
        return Some(Policies::standard);
    }
    POLICY_SETS.iter().find(|s| s.name == name).map(|s| s.make)
}

/// The names of every set this program can start nodes with.
pub fn policy_set_names() -> Vec<&'static str> {
    std::iter::once(STANDARD)
        .chain(POLICY_SETS.iter().map(|s| s.name))
        .collect()
}

/// Registers `$make` (a [`PolicyFactory`](crate::cluster::PolicyFactory))
/// as the policy set `$name`, which nodes of this program can be started
/// with (see [`cluster::policy_set`](crate::cluster::policy_set)).
#[macro_export]
macro_rules! policy_set {
    ($name:expr, $make:path) => {
        const _: () = {
            #[$crate::__private::linkme::distributed_slice($crate::cluster::POLICY_SETS)]
            #[linkme(crate = $crate::__private::linkme)]
            static POLICY_SET: $crate::cluster::PolicySet = $crate::cluster::PolicySet {
                name: $name,
                make: $make,
            };
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread_by_default(seed: u64) -> Policies {
        Policies::standard(seed).with_default(Box::new(ray_sched::SpreadPolicy::new()))
    }

    crate::policy_set!("test-spread-by-default", spread_by_default);

    #[test]
    fn registered_sets_are_found_by_name_and_others_are_not() {
        assert!(policy_set(STANDARD).is_some());
        let make = policy_set("test-spread-by-default").expect("registered");
        assert!(format!("{:?}", make(1)).contains("default: \"spread\""));
        assert!(policy_set("nope").is_none());
        assert!(policy_set_names().contains(&"test-spread-by-default"));
    }
}
