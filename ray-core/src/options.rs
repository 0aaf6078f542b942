//! Per-call options: resources, retries, actor names and concurrency.

use ray_proto::NodeId;
use ray_sched::{LabelSelector, Quantity, ResourceSet, SchedulingStrategy, CPU, GPU, MEMORY};

use crate::error::{Error, Result};
use crate::placement::PlacementGroup;

/// The resources a task or actor asks for. Invalid amounts are kept as an
/// error and reported when the call is submitted.
#[derive(Clone, Debug)]
pub struct ResourceRequest {
    pub(crate) set: ResourceSet,
    pub(crate) invalid: Option<String>,
    pub(crate) strategy: SchedulingStrategy,
    /// The group named by a `PlacementGroup` strategy.
    pub(crate) group: Option<PlacementGroup>,
    /// The node labels required and preferred.
    pub(crate) labels: LabelSelector,
}

impl ResourceRequest {
    fn with_cpu(cpu: Quantity) -> Self {
        Self {
            set: ResourceSet::cpu(cpu),
            invalid: None,
            strategy: SchedulingStrategy::Default,
            group: None,
            labels: LabelSelector::default(),
        }
    }

    /// A request for nothing (bundles start from it).
    /// A request for exactly `set`, placed by the default strategy.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn from_set(set: ResourceSet) -> Self {
        Self {
            set,
            invalid: None,
            strategy: SchedulingStrategy::Default,
            group: None,
            labels: LabelSelector::default(),
        }
    }

    pub(crate) fn empty() -> Self {
        Self::with_cpu(Quantity::ZERO)
    }

    fn set(&mut self, name: &str, amount: f64) {
        match Quantity::from_f64(amount) {
            Ok(q) => self.set.set(name, q),
            Err(e) => {
                self.invalid
                    .get_or_insert_with(|| format!("resource {name}: {e}"));
            }
        }
    }

    pub(crate) fn checked(&self) -> Result<&ResourceSet> {
        match &self.invalid {
            Some(msg) => Err(Error::InvalidArgument(msg.clone())),
            None => Ok(&self.set),
        }
    }
}

/// Options of one task submission. Build them with [`TaskOptionsBuilder`].
#[derive(Clone, Debug)]
pub struct TaskOptions {
    pub(crate) resources: ResourceRequest,
    pub(crate) max_retries: u32,
    pub(crate) retry_exceptions: bool,
}

impl Default for TaskOptions {
    /// One CPU, no retries: Ray's defaults for a task.
    fn default() -> Self {
        Self {
            resources: ResourceRequest::with_cpu(Quantity::ONE),
            max_retries: 0,
            retry_exceptions: false,
        }
    }
}

/// Resource builder methods of tasks and actors.
///
/// A task holds its resources while it runs (default: 1 CPU); an actor holds
/// them for its whole life (default: none).
pub trait ResourceOptions: Sized {
    /// The request being built.
    fn resource_request(&mut self) -> &mut ResourceRequest;

    /// CPUs needed (fractional allowed).
    fn num_cpus(mut self, n: f64) -> Self {
        self.resource_request().set(CPU, n);
        self
    }

    /// GPUs needed (fractional allowed; default 0).
    fn num_gpus(mut self, n: f64) -> Self {
        self.resource_request().set(GPU, n);
        self
    }

    /// Memory in bytes reserved (default 0).
    fn memory(mut self, bytes: u64) -> Self {
        self.resource_request().set(MEMORY, bytes as f64);
        self
    }

    /// An amount of a custom resource the node must have.
    fn resource(mut self, name: &str, amount: f64) -> Self {
        self.resource_request().set(name, amount);
        self
    }

    /// How to choose the node (default: Ray's hybrid policy).
    ///
    /// For placement groups use [`placement_group`](Self::placement_group),
    /// which also names the group's handle.
    fn scheduling_strategy(mut self, strategy: SchedulingStrategy) -> Self {
        let r = self.resource_request();
        r.strategy = strategy;
        r.group = None;
        self
    }

    /// Takes the resources from a bundle of `group` (`None`: the first
    /// bundle that can hold the request) instead of from the node.
    fn placement_group(mut self, group: &PlacementGroup, bundle: Option<usize>) -> Self {
        let r = self.resource_request();
        r.strategy = SchedulingStrategy::PlacementGroup {
            group: group.id(),
            bundle,
        };
        r.group = Some(group.clone());
        self
    }

    /// Spread calls over the nodes.
    fn spread(self) -> Self {
        self.scheduling_strategy(SchedulingStrategy::Spread)
    }

    /// Run on `node`; if `soft`, elsewhere when it cannot. A hard affinity
    /// to a node that cannot take the request fails with `Infeasible`.
    fn node_affinity(self, node: NodeId, soft: bool) -> Self {
        self.scheduling_strategy(SchedulingStrategy::NodeAffinity { node, soft })
    }

    /// Run only on a node labelled `key=value` (`rayrs start --labels`,
    /// [`Config::labels`](crate::Config::labels)); with no such node the
    /// call fails with `Infeasible`. Several pairs must all match.
    fn label(mut self, key: &str, value: &str) -> Self {
        self.resource_request()
            .labels
            .hard
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Prefer a node labelled `key=value`; run elsewhere when none of them
    /// can take the call now.
    fn prefer_label(mut self, key: &str, value: &str) -> Self {
        self.resource_request()
            .labels
            .soft
            .insert(key.to_owned(), value.to_owned());
        self
    }
}

/// Builder methods shared by everything that holds [`TaskOptions`].
pub trait TaskOptionsBuilder: ResourceOptions {
    /// The options being built.
    fn task_options(&mut self) -> &mut TaskOptions;

    /// How many times the task is run again after it fails (default 0).
    ///
    /// System failures (a worker dying) are retried; user errors and panics
    /// only with [`retry_exceptions`](Self::retry_exceptions).
    fn max_retries(mut self, n: u32) -> Self {
        self.task_options().max_retries = n;
        self
    }

    /// Whether panics and `Err` results count as failures to retry.
    fn retry_exceptions(mut self, yes: bool) -> Self {
        self.task_options().retry_exceptions = yes;
        self
    }
}

impl ResourceOptions for TaskOptions {
    fn resource_request(&mut self) -> &mut ResourceRequest {
        &mut self.resources
    }
}

impl TaskOptionsBuilder for TaskOptions {
    fn task_options(&mut self) -> &mut TaskOptions {
        self
    }
}

/// Options of one actor creation. Build them with [`ActorOptionsBuilder`].
#[derive(Clone, Debug)]
pub struct ActorOptions {
    pub(crate) resources: ResourceRequest,
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) max_concurrency: usize,
    pub(crate) detached: bool,
}

impl Default for ActorOptions {
    /// No resources held for life, unnamed, one call at a time.
    fn default() -> Self {
        Self {
            resources: ResourceRequest::with_cpu(Quantity::ZERO),
            name: None,
            namespace: None,
            max_concurrency: 1,
            detached: false,
        }
    }
}

/// Builder methods shared by everything that holds [`ActorOptions`].
pub trait ActorOptionsBuilder: ResourceOptions {
    /// The options being built.
    fn actor_options(&mut self) -> &mut ActorOptions;

    /// A name, unique in its namespace, to find the actor with `get_actor`.
    fn name(mut self, name: impl Into<String>) -> Self {
        self.actor_options().name = Some(name.into());
        self
    }

    /// The namespace of the name (default: the runtime's namespace).
    fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.actor_options().namespace = Some(ns.into());
        self
    }

    /// How many calls may run at once (default 1: one at a time, in order).
    ///
    /// Calls taking `&mut self` still run alone; `&self` calls share.
    fn max_concurrency(mut self, n: usize) -> Self {
        self.actor_options().max_concurrency = n;
        self
    }

    /// Whether the actor outlives the handles to it until killed or shutdown.
    fn detached(mut self, yes: bool) -> Self {
        self.actor_options().detached = yes;
        self
    }
}

impl ResourceOptions for ActorOptions {
    fn resource_request(&mut self) -> &mut ResourceRequest {
        &mut self.resources
    }
}

impl ActorOptionsBuilder for ActorOptions {
    fn actor_options(&mut self) -> &mut ActorOptions {
        self
    }
}

impl ActorOptions {
    pub(crate) fn validate(&self) -> Result<&ResourceSet> {
        if self.max_concurrency == 0 {
            return Err(Error::InvalidArgument(
                "max_concurrency must be at least 1".into(),
            ));
        }
        if self.name.as_deref() == Some("") {
            return Err(Error::InvalidArgument(
                "actor name must not be empty".into(),
            ));
        }
        self.resources.checked()
    }
}
