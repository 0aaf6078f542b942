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
        if name.trim().is_empty() || name.chars().any(char::is_control) {
            self.invalid
                .get_or_insert_with(|| format!("resource name {name:?}: must be a non-empty name"));
            return;
        }
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
    /// Retries after a failure; [`RETRY_FOREVER`] for no limit.
    pub(crate) max_retries: u32,
    pub(crate) retry_exceptions: RetryExceptions,
    /// A `max_retries` that means nothing (below -1), refused at submit.
    pub(crate) bad_retries: Option<i32>,
}

impl Default for TaskOptions {
    /// One CPU, 3 retries of system failures: Ray's defaults for a task.
    fn default() -> Self {
        Self {
            resources: ResourceRequest::with_cpu(Quantity::ONE),
            max_retries: DEFAULT_MAX_RETRIES as u32,
            retry_exceptions: RetryExceptions::No,
            bad_retries: None,
        }
    }
}

/// Which user errors of a task are retried (within `max_retries`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum RetryExceptions {
    /// None: only system failures are.
    #[default]
    No,
    /// Every panic and `Err`.
    All,
    /// `Err`s of these types (their `std::any::type_name`).
    Types(std::sync::Arc<[String]>),
}

impl RetryExceptions {
    /// Whether `e`, a task's own failure, is retried.
    pub(crate) fn covers(&self, e: &Error) -> bool {
        match (self, e) {
            (Self::All, Error::TaskPanicked { .. } | Error::TaskFailed { .. }) => true,
            (Self::Types(types), Error::TaskFailed { error, .. }) => {
                types.iter().any(|t| t == error.type_name())
            }
            _ => false,
        }
    }

    /// The wire form: (all, type names).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn to_wire(&self) -> (bool, Vec<String>) {
        match self {
            Self::No => (false, Vec::new()),
            Self::All => (true, Vec::new()),
            Self::Types(types) => (false, types.to_vec()),
        }
    }

    /// From the wire form.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn from_wire(all: bool, types: Vec<String>) -> Self {
        match (all, types.is_empty()) {
            (true, _) => Self::All,
            (false, true) => Self::No,
            (false, false) => Self::Types(types.into()),
        }
    }
}

/// `max_retries` of a task that retries forever (`-1` to the user).
pub(crate) const RETRY_FOREVER: u32 = u32::MAX;

/// A task's retries unless it says otherwise (Ray's default).
pub const DEFAULT_MAX_RETRIES: i32 = 3;

impl TaskOptions {
    /// The options, or why they cannot be used.
    pub(crate) fn check_retries(&self) -> Result<()> {
        match self.bad_retries {
            Some(n) => Err(Error::InvalidArgument(format!(
                "max_retries must be -1 (retry forever) or at least 0, not {n}"
            ))),
            None => Ok(()),
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

    /// How many times the task is run again after it fails (default
    /// [`DEFAULT_MAX_RETRIES`], 3; `-1` retries forever, as in Ray).
    ///
    /// System failures are retried: on a cluster, the worker process
    /// running it exited or was lost with its node. User errors and panics
    /// are retried only with [`retry_exceptions`](Self::retry_exceptions).
    /// A retried task may run more than once; its result is delivered once.
    /// A value below -1 is refused at submit with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    fn max_retries(mut self, n: i32) -> Self {
        let o = self.task_options();
        match count(n) {
            Some(n) => {
                o.max_retries = n;
                o.bad_retries = None;
            }
            None => o.bad_retries = Some(n),
        }
        self
    }

    /// Whether panics and `Err` results count as failures to retry
    /// (within `max_retries`, as Ray's `retry_exceptions=True`).
    fn retry_exceptions(mut self, yes: bool) -> Self {
        self.task_options().retry_exceptions = match yes {
            true => RetryExceptions::All,
            false => RetryExceptions::No,
        };
        self
    }

    /// Retries `Err` results of type `E` (within `max_retries`), as Ray's
    /// `retry_exceptions=[SomeError]`; call once per type. Other errors
    /// and panics end the task. `E` is the error type of the function's
    /// `Result`, matched by [`std::any::type_name`].
    fn retry_exceptions_of<E: 'static>(mut self) -> Self {
        let name = std::any::type_name::<E>().to_string();
        let o = self.task_options();
        o.retry_exceptions = match &o.retry_exceptions {
            RetryExceptions::All => RetryExceptions::All,
            RetryExceptions::No => RetryExceptions::Types(vec![name].into()),
            RetryExceptions::Types(t) => {
                let mut t = t.to_vec();
                if !t.contains(&name) {
                    t.push(name);
                }
                RetryExceptions::Types(t.into())
            }
        };
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
    /// Restarts after its process dies ([`RETRY_FOREVER`]: no limit).
    pub(crate) max_restarts: u32,
    /// Re-sends of a call in flight when its process died
    /// ([`RETRY_FOREVER`]: no limit).
    pub(crate) max_task_retries: u32,
    /// A count below -1 given to one of those two: (option, value).
    pub(crate) bad_count: Option<(&'static str, i32)>,
    /// A worker process of its own on a cluster.
    pub(crate) isolated: bool,
}

impl Default for ActorOptions {
    /// No resources held for life, unnamed, one call at a time, never
    /// restarted (Ray's defaults).
    fn default() -> Self {
        Self {
            resources: ResourceRequest::with_cpu(Quantity::ZERO),
            name: None,
            namespace: None,
            max_concurrency: 1,
            detached: false,
            max_restarts: 0,
            max_task_retries: 0,
            bad_count: None,
            isolated: false,
        }
    }
}

/// Sets `target` to count `n`, or records `n` as `option`'s bad value.
fn set_count(
    target: &mut u32,
    bad: &mut Option<(&'static str, i32)>,
    option: &'static str,
    n: i32,
) {
    match count(n) {
        Some(n) => *target = n,
        None => *bad = Some((option, n)),
    }
}

/// A retry count as Ray takes it: `n >= 0`, or -1 for no limit; `None`
/// for anything below -1.
fn count(n: i32) -> Option<u32> {
    match u32::try_from(n) {
        Ok(n) => Some(n),
        Err(_) if n == -1 => Some(RETRY_FOREVER),
        Err(_) => None,
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

    /// How many times the actor is re-created after the process hosting it
    /// dies (default 0; -1: no limit), as in Ray: its constructor runs
    /// again with its original arguments, on another node if its node
    /// died, under the same id and name. Calls made meanwhile wait for it.
    /// The actor's state is not kept: it starts afresh.
    ///
    /// Only a cluster has processes to lose; embedded, the option is
    /// accepted and never used. A value below -1 is refused at create with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    fn max_restarts(mut self, n: i32) -> Self {
        let o = self.actor_options();
        set_count(&mut o.max_restarts, &mut o.bad_count, "max_restarts", n);
        self
    }

    /// How many times a call in flight when the actor's process died is
    /// sent again to its next life (default 0; -1: no limit): calls run at
    /// least once. Without it such calls fail with
    /// [`Error::ActorUnavailable`](crate::Error::ActorUnavailable) while
    /// the actor restarts, or `ActorDied` when it will not. A value below
    /// -1 is refused at create.
    fn max_task_retries(mut self, n: i32) -> Self {
        let o = self.actor_options();
        set_count(
            &mut o.max_task_retries,
            &mut o.bad_count,
            "max_task_retries",
            n,
        );
        self
    }

    /// Whether the actor gets a worker process of its own (default
    /// `false`). On a cluster, the actors and tasks of one job on one
    /// node share that job's worker process there: fast, but one crash
    /// (an abort, a segfault in native code, an OOM kill) takes all of
    /// them. An isolated actor's crash takes only it (and restarts it,
    /// within `max_restarts`), at the cost of a process started for it
    /// (tens of milliseconds and its memory) and of its calls and objects
    /// crossing processes. Embedded, there is one process: the option is
    /// accepted and changes nothing.
    fn isolated(mut self, yes: bool) -> Self {
        self.actor_options().isolated = yes;
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
        if let Some((option, n)) = self.bad_count {
            return Err(Error::InvalidArgument(format!(
                "{option} must be -1 (no limit) or at least 0, not {n}"
            )));
        }
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
