//! The shell of the owner's side of task submission. What to do (queues
//! per scheduling key, leases, pipelines, retries) is decided by the
//! sans-IO [`TaskOwner`]; this file turns its actions into lease requests,
//! pushes on work streams, returned leases and failed objects, and feeds
//! it lease answers, results, lost streams and time.

use ray_proto::wire::{labels_to_wire, ArgBytes, Label, TaskRow};

use super::*;
use crate::cluster::task_owner::{Action, Answer, Budget, Grant, Shell, TaskOwner, LEASE_RETRY};

/// Where a scheduling key's work goes: same resources, same strategy.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) struct SchedKey {
    pub(super) resources: Vec<ResourceAmount>,
    pub(super) strategy: WireStrategy,
    pub(super) labels: WireLabels,
}

/// A label selector in wire form: the hard pairs, then the soft ones.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct WireLabels {
    pub(super) hard: Vec<Label>,
    pub(super) soft: Vec<Label>,
}

impl WireLabels {
    pub(super) fn of(selector: &ray_sched::LabelSelector) -> Self {
        Self {
            hard: labels_to_wire(&selector.hard),
            soft: labels_to_wire(&selector.soft),
        }
    }
}

/// Times [`ClusterCore::lease`] asks again when the worker a lease names
/// cannot be reached.
const UNREACHABLE_TRIES: u32 = 3;

/// Why a lease request did not give a usable lease.
pub(super) enum LeaseError {
    /// Granted, but its worker could not be reached (its node died after
    /// granting): the lease went back; asking again may find another.
    Unreachable(Error),
    /// Refused, infeasible, or the local node could not be asked.
    Refused(Error),
}

impl From<Error> for LeaseError {
    fn from(e: Error) -> Self {
        Self::Refused(e)
    }
}

/// What the owner keeps of a task to push it (again): handed back when it
/// ends, so its argument refs live until then.
pub(super) struct Queued {
    pub(super) function: &'static RemoteFunction,
    pub(super) args: Vec<WireArg>,
    pub(super) _keep: Vec<TaskArg>,
    pub(super) retry_exceptions: crate::options::RetryExceptions,
    pub(super) parent: Option<TaskId>,
    /// The caller's span it was submitted in, or 0 (for insight).
    pub(super) parent_span: u64,
    /// Bytes of its arguments by node, for the locality strategy (empty
    /// for the others).
    pub(super) arg_bytes: Vec<ArgBytes>,
}

/// The shell types of the owner's [`TaskOwner`]: keys, payloads, errors,
/// and work streams as the workers they reach.
pub(super) struct Tasks;

impl Shell for Tasks {
    type Key = SchedKey;
    type Payload = Queued;
    type Error = Error;
    type Worker = LinkRef;
}

/// A work stream, equal only to itself: a new stream to the same address
/// is another worker process (or another life of the link).
#[derive(Clone)]
pub(super) struct LinkRef(pub(super) Arc<Link>);

impl PartialEq for LinkRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LinkRef {}

pub(super) enum InflightKind {
    /// A call of an actor of this class.
    ActorCall {
        class: &'static str,
        /// The actor's state, whose machine hears of the call's answer or
        /// loss.
        actor: Arc<RemoteActor>,
        method: &'static ActorMethod,
        parent: Option<TaskId>,
        parent_span: u64,
    },
    ActorCreate(oneshot::Sender<Result<(), Error>>),
}

/// Actor work pushed and not answered yet (tasks live in [`TaskOwner`]).
pub(super) struct Inflight {
    pub(super) kind: InflightKind,
    pub(super) name: &'static str,
    pub(super) link: SocketAddr,
    pub(super) node: NodeId,
    /// Argument refs kept alive until the result is back (and to send a
    /// call again to an actor's next life).
    pub(super) args: Vec<TaskArg>,
}

#[derive(Default)]
pub(super) struct OwnerState {
    /// Tasks: the sans-IO core.
    pub(super) tasks: TaskOwner<Tasks>,
    /// Actor calls and creations pushed and not answered.
    pub(super) inflight: HashMap<TaskId, Inflight>,
}

impl OwnerState {
    /// The state API's rows of the tasks this owner has not finished:
    /// queued for a lease, or pushed and not answered.
    pub(super) fn task_rows(&self) -> Vec<TaskRow> {
        let tasks = self.tasks.tasks().map(|(task, key, q, node)| TaskRow {
            task,
            name: q.function.name.to_string(),
            state: if node.is_some() { "RUNNING" } else { "QUEUED" }.into(),
            node,
            resources: if node.is_some() {
                Vec::new()
            } else {
                key.resources.clone()
            },
        });
        let actors = self.inflight.iter().map(|(task, f)| TaskRow {
            task: *task,
            name: f.name.to_string(),
            state: "RUNNING".into(),
            node: Some(f.node),
            resources: Vec::new(),
        });
        tasks.chain(actors).collect()
    }
}

impl ClusterCore {
    /// Submits a task to the cluster; its result completes `spec.task`'s
    /// return object in this process's table.
    pub(crate) fn submit_task(
        self: &Arc<Self>,
        spec: TaskSpec,
        strategy: &SchedulingStrategy,
        labels: &ray_sched::LabelSelector,
    ) {
        let key = SchedKey {
            resources: resources_to_wire(&spec.resources),
            strategy: strategy_to_wire(strategy),
            labels: WireLabels::of(labels),
        };
        let deps = crate::task::pending_deps(&spec.args);
        if deps.is_empty() {
            self.queue_with_args(key, spec);
            return;
        }
        let me = self.clone();
        crate::task::when_ready(deps, move || me.queue_with_args(key, spec));
    }

    /// Queues `spec` with its arguments (all there by now) in wire form.
    /// Refs whose owners' addresses are not known yet wait for a lookup
    /// on the runtime first.
    pub(super) fn queue_with_args(self: &Arc<Self>, key: SchedKey, spec: TaskSpec) {
        if let Some(args) = self.wire_args_now(&spec.args) {
            self.queue(key, spec, args);
            return;
        }
        let me = self.clone();
        self.tokio.spawn(async move {
            match me.wire_args(&spec.args).await {
                Ok(args) => me.queue(key, spec, args),
                Err(e) => {
                    if let Some(rt) = me.rt() {
                        rt.complete_object(spec.task.return_object(), Err(e));
                    }
                }
            }
        });
    }

    pub(super) fn queue(self: &Arc<Self>, key: SchedKey, spec: TaskSpec, args: Vec<WireArg>) {
        let arg_bytes = if key.strategy == WireStrategy::Locality {
            self.arg_bytes(&spec.args)
        } else {
            Vec::new()
        };
        let q = Queued {
            arg_bytes,
            function: spec.function,
            args,
            _keep: spec.args,
            retry_exceptions: spec.retry_exceptions,
            parent: spec.parent,
            parent_span: spec.parent_span,
        };
        let spread = key.strategy == WireStrategy::Spread;
        let mut st = self.owner.lock();
        let budget = Budget {
            attempt: spec.attempt,
            max_retries: spec.max_retries,
        };
        st.tasks
            .submit(&key, spread, spec.task, q, budget, Instant::now());
        self.drive(st);
    }

    /// Bytes of `args` by node, as far as this process knows: the objects
    /// it holds itself are on its node. (Borrowed objects held elsewhere
    /// are not counted yet: their owners' nodes are not known here.)
    fn arg_bytes(&self, args: &[TaskArg]) -> Vec<ArgBytes> {
        let Some(rt) = self.rt() else {
            return Vec::new();
        };
        let bytes: u64 = args
            .iter()
            .filter_map(|a| match &a.0 {
                ArgKind::Ref(h) => h.local_bytes(),
                ArgKind::Value(..) => None,
            })
            .sum();
        if bytes == 0 {
            return Vec::new();
        }
        vec![ArgBytes {
            node: rt.node,
            bytes,
        }]
    }

    /// Carries out what the task core asks for, after releasing the owner
    /// lock: the work items are built under it (they read the tasks'
    /// payloads), everything is sent and asked once it is free, so the
    /// submitting thread and the result reader do not wait on each other's
    /// channel sends. (Tasks on one lease may reach the worker out of
    /// order when two threads drive at once; tasks carry no order.)
    pub(super) fn drive(self: &Arc<Self>, mut st: parking_lot::MutexGuard<'_, OwnerState>) {
        // Items by worker, in order; one worker handle per run of items.
        let mut pushes: Vec<(LinkRef, Vec<WorkItem>)> = Vec::new();
        let mut later = Vec::new();
        while let Some(action) = st.tasks.poll() {
            match action {
                Action::Push {
                    task,
                    attempt,
                    lease,
                    max_retries,
                } => {
                    if attempt > 0 {
                        // The run before this one was lost with its worker.
                        crate::trace::lost(task, Some(attempt - 1), None);
                    }
                    let tasks = &st.tasks;
                    let (Some(q), Some(key), Some(worker)) = (
                        tasks.payload(task),
                        tasks.key_of(task),
                        tasks.worker_of(task),
                    ) else {
                        continue;
                    };
                    let (retry_exceptions, retry_on) = q.retry_exceptions.to_wire();
                    let item = WorkItem::Task {
                        task,
                        function: q.function.id,
                        args: q.args.clone(),
                        lease,
                        resources: key.resources.clone(),
                        attempt,
                        max_retries,
                        retry_exceptions,
                        retry_on,
                        parent: q.parent,
                        parent_span: q.parent_span,
                    };
                    match pushes.last_mut() {
                        Some((w, items)) if w == worker => items.push(item),
                        _ => pushes.push((worker.clone(), vec![item])),
                    }
                }
                other => later.push(other),
            }
        }
        drop(st);
        for (worker, items) in pushes {
            for item in items {
                // A closed stream is reported by its reader ending
                // (`link_died`), which hands the task back to the core.
                let _ = worker.0.tx.send(item);
            }
        }
        for action in later {
            match action {
                Action::Push { .. } => {}
                Action::RequestLease { key } => {
                    let me = self.clone();
                    self.tokio.spawn(async move { me.request_lease(key).await });
                }
                Action::ReturnLease { node, lease } => self.return_lease(node, lease),
                Action::Fail {
                    task,
                    payload,
                    error,
                    infeasible,
                } => {
                    let error = match error {
                        Error::Infeasible {
                            reason,
                            request,
                            total,
                            ..
                        } if infeasible => Error::Infeasible {
                            what: payload.function.name.to_string(),
                            reason,
                            request,
                            total,
                        },
                        e => e,
                    };
                    crate::trace::lost(task, None, Some(&error));
                    if let Some(rt) = self.rt() {
                        rt.complete_object(task.return_object(), Err(error));
                    }
                    drop(payload);
                }
                Action::WakeAt { at } => {
                    let me = self.clone();
                    self.tokio.spawn(async move {
                        tokio::time::sleep_until(at.into()).await;
                        let mut st = me.owner.lock();
                        st.tasks.tick(Instant::now());
                        me.drive(st);
                    });
                }
            }
        }
    }

    pub(super) async fn request_lease(self: Arc<Self>, key: SchedKey) {
        // The lease goes where the next task's arguments are (locality).
        let arg_bytes = self
            .owner
            .lock()
            .tasks
            .next_payload(&key)
            .map(|q| q.arg_bytes.clone())
            .unwrap_or_default();
        let result = self
            .lease_once(&key.resources, &key.strategy, &key.labels, arg_bytes, false)
            .await;
        let answer = match result {
            // Its worker went away between the grant and now, or could not
            // be reached (its node died after granting): ask again.
            Ok((lease, node, link)) if link.is_dead() => Answer::WorkerGone {
                lease: Some((node, lease)),
            },
            Err(LeaseError::Unreachable(error)) => {
                // Most likely its node just died, which the GCS will say
                // soon; not at once again (no hot loop against a node the
                // owner cannot reach).
                tracing::debug!(target: "ray::cluster", error = %error, "lease.worker_unreachable");
                tokio::time::sleep(LEASE_RETRY).await;
                Answer::WorkerGone { lease: None }
            }
            Err(LeaseError::Refused(error)) => {
                if !matches!(error, Error::Infeasible { .. }) {
                    tracing::debug!(target: "ray::cluster", error = %error, "lease.request_failed");
                }
                Answer::Failed {
                    infeasible: matches!(error, Error::Infeasible { .. }),
                    error,
                }
            }
            Ok((lease, node, link)) => Answer::Granted(Grant {
                lease,
                node,
                worker: LinkRef(link),
            }),
        };
        let mut st = self.owner.lock();
        st.tasks.answer(&key, answer, Instant::now());
        self.drive(st);
    }

    /// Asks the local node daemon for a lease; returns it with the link to
    /// the worker it names. A granted worker that cannot be reached (its
    /// node died after granting) is given back and another lease asked
    /// for, a few times, [`LEASE_RETRY`] apart (as the task path does).
    pub(super) async fn lease(
        self: &Arc<Self>,
        resources: &[ResourceAmount],
        strategy: &WireStrategy,
        labels: &WireLabels,
        arg_bytes: Vec<ArgBytes>,
        isolated: bool,
    ) -> Result<(TaskId, NodeId, Arc<Link>), Error> {
        let mut tries = 0;
        loop {
            let once = self
                .lease_once(resources, strategy, labels, arg_bytes.clone(), isolated)
                .await;
            match once {
                Ok(granted) => return Ok(granted),
                Err(LeaseError::Unreachable(e)) if tries < UNREACHABLE_TRIES => {
                    tracing::debug!(target: "ray::cluster", error = %e, "lease.worker_unreachable");
                    tries += 1;
                    tokio::time::sleep(LEASE_RETRY).await;
                }
                Err(LeaseError::Unreachable(e) | LeaseError::Refused(e)) => return Err(e),
            }
        }
    }

    /// One lease request; see [`ClusterCore::lease`].
    async fn lease_once(
        self: &Arc<Self>,
        resources: &[ResourceAmount],
        strategy: &WireStrategy,
        labels: &WireLabels,
        arg_bytes: Vec<ArgBytes>,
        isolated: bool,
    ) -> Result<(TaskId, NodeId, Arc<Link>), LeaseError> {
        let rt = self.rt().ok_or(Error::ShutDown)?;
        let lease = rt.new_task_id();
        let request = RequestLease {
            lease,
            job: self.job,
            binary_hash: self.binary_hash,
            fingerprint: self.fingerprint,
            resources: resources.to_vec(),
            strategy: strategy.clone(),
            spilled_from: None,
            hard_labels: labels.hard.clone(),
            soft_labels: labels.soft.clone(),
            arg_bytes,
            owner: self.my_addr.clone(),
            isolated,
        };
        match self.ask(self.local_node, request).await? {
            Ok(NodeReply::LeaseGranted(LeaseGranted {
                lease,
                node,
                address,
                worker,
            })) => {
                let addr = parse_addr(&address)?;
                match self.link(addr, node, worker).await {
                    Ok(link) => Ok((lease, node, link)),
                    Err(e) => {
                        self.return_lease(node, lease);
                        Err(LeaseError::Unreachable(e))
                    }
                }
            }
            Ok(NodeReply::LeaseInfeasible(LeaseInfeasible { reason })) => Err(Error::Infeasible {
                what: String::new(),
                reason,
                request: Box::new(resources_from_wire(resources)),
                total: Box::new(ray_sched::ResourceSet::new()),
            }
            .into()),
            Err(Message::Error { reason }) => {
                // Work into a group this process removed meanwhile: the
                // node gave it up for that; say so, as embedded.
                if let WireStrategy::PlacementGroup { group, .. } = strategy {
                    if let Some(cause) = self.pg_removed(*group) {
                        return Err(Error::PlacementGroupRemoved {
                            group: *group,
                            cause,
                        }
                        .into());
                    }
                }
                Err(Error::cluster(format!("lease refused: {reason}")).into())
            }
            other => {
                let other = other.map_or_else(|message| message, Message::from);
                Err(
                    Error::cluster(format!("unexpected answer to a lease request: {other:?}"))
                        .into(),
                )
            }
        }
    }

    pub(super) fn return_lease(self: &Arc<Self>, node: NodeId, lease: TaskId) {
        let me = self.clone();
        self.tokio.spawn(async move {
            if let Ok(addr) = me.node_addr(node).await {
                let _ = me.ask(addr, ReturnLease { lease }).await;
            }
        });
    }

    /// Returns leases idle for longer than [`LEASE_IDLE`] (the task core's
    /// clock).
    pub(super) async fn reap_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(LEASE_IDLE / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.rt().is_none() {
                return;
            }
            let mut st = self.owner.lock();
            st.tasks.tick(Instant::now());
            self.drive(st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an owner keeps of each unfinished task to run it again (its
    /// lineage): the core's entry with the shell's payload inline; the
    /// arguments' own bytes come on top (a value argument's archive, 8
    /// bytes per ref argument, the ref's count). Printed for
    /// docs/fault-tolerance.md.
    #[test]
    fn a_tasks_lineage_entry_stays_small() {
        let entry = crate::cluster::task_owner::entry_bytes::<Tasks>();
        eprintln!(
            "lineage entry: {entry} bytes (payload {} of it)",
            std::mem::size_of::<Queued>()
        );
        assert!(entry <= 256, "{entry} bytes per task");
    }
}
