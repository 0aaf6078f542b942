//! The owner's side of task submission: tasks queued per scheduling key
//! (resources and strategy), leases asked of the local node daemon (one
//! per task beyond the leases held, up to [`MAX_LEASE_REQUESTS`] at once,
//! so a backlog spreads over the nodes), the backlog shared among the
//! leases up to [`PIPELINE`] each, and leases returned when idle.

use ray_proto::wire::{labels_to_wire, ArgBytes, Label, TaskRow};

use super::*;

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

/// A task waiting for a lease.
pub(super) struct Queued {
    pub(super) task: TaskId,
    pub(super) function: &'static RemoteFunction,
    pub(super) args: Vec<WireArg>,
    pub(super) keep: Vec<TaskArg>,
    pub(super) attempt: u32,
    pub(super) max_retries: u32,
    pub(super) retry_exceptions: bool,
    pub(super) parent: Option<TaskId>,
    /// Bytes of its arguments by node, for the locality strategy (empty
    /// for the others).
    pub(super) arg_bytes: Vec<ArgBytes>,
}

pub(super) struct Lease {
    pub(super) id: TaskId,
    pub(super) node: NodeId,
    pub(super) link: Arc<Link>,
    pub(super) inflight: usize,
    pub(super) idle_since: Option<Instant>,
    /// Since when the lease's oldest unanswered task has (about) been
    /// running: when it got work while idle, or its last result.
    pub(super) busy_from: Option<Instant>,
}

#[derive(Default)]
pub(super) struct KeyState {
    pub(super) queue: VecDeque<Queued>,
    pub(super) leases: Vec<Lease>,
    /// Lease requests sent and not answered yet.
    pub(super) requesting: usize,
    /// A running average of how long one task of this shape takes a
    /// worker, in nanoseconds, from the spacing of results (0: unknown).
    pub(super) task_nanos: u64,
    /// After a lease request failed while other leases could still run
    /// the queue: no new request before this (the next result pumps).
    pub(super) retry_at: Option<Instant>,
}

impl KeyState {
    /// Notes a result of a task that took a worker about `took`.
    pub(super) fn observe(&mut self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.task_nanos = if self.task_nanos == 0 {
            took
        } else {
            (self.task_nanos.saturating_mul(7) / 8).saturating_add(took / 8)
        };
    }

    /// How many tasks one lease may have pushed: enough to cover
    /// [`PIPELINE_BUDGET`] of work (short tasks fill the pipeline and hide
    /// the round trip; long ones go one or two at a time, so a lease granted
    /// later still finds work queued), two while their length is unknown.
    pub(super) fn depth_for_length(&self) -> usize {
        match self.task_nanos {
            0 => 2,
            n => usize::try_from(PIPELINE_BUDGET.as_nanos() as u64 / n)
                .unwrap_or(PIPELINE)
                .clamp(1, PIPELINE),
        }
    }
}

/// Takes out the leases of `ks` idle for at least `min_idle` at `now`
/// into `out` as (node, lease).
pub(super) fn take_idle(
    ks: &mut KeyState,
    now: Instant,
    min_idle: Duration,
    out: &mut Vec<(NodeId, TaskId)>,
) {
    ks.leases.retain(|l| {
        let idle = l.inflight == 0 && l.idle_since.is_some_and(|t| now - t >= min_idle);
        if idle {
            out.push((l.node, l.id));
        }
        !idle
    });
}

pub(super) enum InflightKind {
    Task {
        key: SchedKey,
        lease: TaskId,
    },
    /// A call of an actor of this class.
    ActorCall {
        class: &'static str,
    },
    ActorCreate(oneshot::Sender<Result<(), Error>>),
}

/// Work pushed and not answered yet.
pub(super) struct Inflight {
    pub(super) kind: InflightKind,
    pub(super) name: &'static str,
    pub(super) link: SocketAddr,
    pub(super) node: NodeId,
    /// Argument refs kept alive until the result is back.
    pub(super) _keep: Vec<TaskArg>,
}

#[derive(Default)]
pub(super) struct OwnerState {
    pub(super) keys: HashMap<SchedKey, KeyState>,
    pub(super) inflight: HashMap<TaskId, Inflight>,
}

impl OwnerState {
    /// Takes out the leases of keys other than `key` that have nothing
    /// queued and have idled for [`LEASE_IDLE_WHILE_OTHERS_WAIT`]: work of
    /// `key` waits for a lease. Returns (node, lease) of each, to return.
    pub(super) fn take_idle_leases_of_others(&mut self, key: &SchedKey) -> Vec<(NodeId, TaskId)> {
        let mut out = Vec::new();
        let mut now = None;
        for (k, ks) in self.keys.iter_mut() {
            if k == key || !ks.queue.is_empty() || ks.leases.is_empty() {
                continue;
            }
            let now = *now.get_or_insert_with(Instant::now);
            take_idle(ks, now, LEASE_IDLE_WHILE_OTHERS_WAIT, &mut out);
        }
        out
    }

    /// Whether work of a key other than `key` waits for a lease.
    pub(super) fn others_waiting(&self, key: &SchedKey) -> bool {
        self.keys
            .iter()
            .any(|(k, ks)| k != key && !ks.queue.is_empty())
    }

    /// The state API's rows of the tasks this owner has not finished:
    /// queued for a lease, or pushed and not answered.
    pub(super) fn task_rows(&self) -> Vec<TaskRow> {
        let queued = self.keys.iter().flat_map(|(k, ks)| {
            ks.queue.iter().map(|q| TaskRow {
                task: q.task,
                name: q.function.name.to_string(),
                state: "QUEUED".into(),
                node: None,
                resources: k.resources.clone(),
            })
        });
        let running = self.inflight.iter().map(|(task, f)| TaskRow {
            task: *task,
            name: f.name.to_string(),
            state: "RUNNING".into(),
            node: Some(f.node),
            resources: Vec::new(),
        });
        queued.chain(running).collect()
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
            task: spec.task,
            function: spec.function,
            args,
            keep: spec.args,
            attempt: spec.attempt,
            max_retries: spec.max_retries,
            retry_exceptions: spec.retry_exceptions,
            parent: spec.parent,
        };
        self.owner
            .lock()
            .keys
            .entry(key.clone())
            .or_default()
            .queue
            .push_back(q);
        self.pump(&key);
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

    /// Pushes queued work of `key` onto its leases; asks for more leases
    /// while queued work exceeds the leases held and asked for.
    pub(super) fn pump(self: &Arc<Self>, key: &SchedKey) {
        let mut requests = 0;
        let mut give_back = Vec::new();
        {
            let mut st = self.owner.lock();
            let OwnerState { keys, inflight } = &mut *st;
            let Some(ks) = keys.get_mut(key) else { return };
            // A lease whose worker is gone takes no more work and must not
            // count as capacity (its inflight work was failed with it).
            ks.leases.retain(|l| !l.link.is_dead());
            // The backlog: work queued here and pushed but not answered.
            let backlog = ks.queue.len() + ks.leases.iter().map(|l| l.inflight).sum::<usize>();
            // Ask for a lease per task beyond the leases held, a few at a
            // time: the node grants them locally while it has room and
            // spills the rest to nodes with free resources, so a backlog
            // spreads over the cluster instead of queueing on one lease.
            let backing_off = ks.retry_at.is_some_and(|t| Instant::now() < t);
            if !ks.queue.is_empty() && !backing_off {
                let want = backlog
                    .saturating_sub(ks.leases.len())
                    .min(MAX_LEASE_REQUESTS);
                requests = want.saturating_sub(ks.requesting);
                ks.requesting += requests;
            }
            // Spread work takes one lease per task in flight, so every task
            // is placed by the policy (a deep pipeline would put a burst on
            // the first node that granted a lease). Other work shares the
            // backlog among the leases held and those asked for: a lease
            // on its way gets its share rather than finding it all pushed
            // to the first one. A deep backlog still fills every pipeline.
            let depth = if key.strategy == WireStrategy::Spread {
                1
            } else {
                let slots = (ks.leases.len() + ks.requesting).max(1);
                backlog
                    .div_ceil(slots)
                    .min(ks.depth_for_length())
                    .clamp(1, PIPELINE)
            };
            while !ks.queue.is_empty() {
                let Some(lease) = ks
                    .leases
                    .iter_mut()
                    .filter(|l| l.inflight < depth && !l.link.is_dead())
                    .min_by_key(|l| l.inflight)
                else {
                    break;
                };
                let Some(q) = ks.queue.pop_front() else { break };
                if lease.inflight == 0 {
                    lease.busy_from = Some(Instant::now());
                }
                lease.inflight += 1;
                lease.idle_since = None;
                let item = WorkItem::Task {
                    task: q.task,
                    function: q.function.id,
                    args: q.args,
                    lease: lease.id,
                    resources: key.resources.clone(),
                    attempt: q.attempt,
                    max_retries: q.max_retries,
                    retry_exceptions: q.retry_exceptions,
                    parent: q.parent,
                };
                inflight.insert(
                    q.task,
                    Inflight {
                        kind: InflightKind::Task {
                            key: key.clone(),
                            lease: lease.id,
                        },
                        name: q.function.name,
                        link: lease.link.addr,
                        node: lease.node,
                        _keep: q.keep,
                    },
                );
                // A closed link fails its inflight work when its reader ends.
                let _ = lease.link.tx.send(item);
            }
            let waiting = !ks.queue.is_empty();
            if !waiting && ks.leases.is_empty() && ks.requesting == 0 {
                keys.remove(key);
            }
            if waiting {
                give_back = st.take_idle_leases_of_others(key);
            }
        }
        for (node, lease) in give_back {
            self.return_lease(node, lease);
        }
        for _ in 0..requests {
            let me = self.clone();
            let key = key.clone();
            self.tokio.spawn(async move { me.request_lease(key).await });
        }
    }

    pub(super) async fn request_lease(self: Arc<Self>, key: SchedKey) {
        // The lease goes where the next task's arguments are (locality).
        let arg_bytes = self
            .owner
            .lock()
            .keys
            .get(&key)
            .and_then(|ks| ks.queue.front())
            .map(|q| q.arg_bytes.clone())
            .unwrap_or_default();
        let result = self
            .lease(&key.resources, &key.strategy, &key.labels, arg_bytes)
            .await;
        let mut retry_later = false;
        let failed = {
            let mut st = self.owner.lock();
            let others_waiting = st.others_waiting(&key);
            let Some(ks) = st.keys.get_mut(&key) else {
                drop(st);
                if let Ok((lease, node, _)) = result {
                    self.return_lease(node, lease);
                }
                return;
            };
            ks.requesting = ks.requesting.saturating_sub(1);
            match result {
                Ok((id, node, _))
                    if ks.queue.is_empty() && (others_waiting || !ks.leases.is_empty()) =>
                {
                    // Granted after this key's work ran out, while other
                    // work waits for a lease or another lease of this key
                    // is there for what comes next: its CPUs go back at once.
                    drop(st);
                    self.return_lease(node, id);
                    None
                }
                // Its worker went away between the grant and now.
                Ok((_, _, link)) if link.is_dead() => None,
                Ok((id, node, link)) => {
                    ks.leases.push(Lease {
                        id,
                        node,
                        link,
                        inflight: 0,
                        idle_since: Some(Instant::now()),
                        busy_from: None,
                    });
                    None
                }
                // Other leases held or on their way can still run the
                // queue: only infeasible work, or the last hope failing,
                // fails it. New requests wait a little (no hot loop
                // against a node that keeps refusing).
                Err(e)
                    if !matches!(e, Error::Infeasible { .. })
                        && (!ks.leases.is_empty() || ks.requesting > 0) =>
                {
                    tracing::debug!(target: "ray::cluster", error = %e, "lease.request_failed");
                    ks.retry_at = Some(Instant::now() + LEASE_RETRY);
                    retry_later = true;
                    None
                }
                Err(e) => Some((std::mem::take(&mut ks.queue), e)),
            }
        };
        if retry_later {
            // Pumped again once the pause is over, even if no result comes
            // meanwhile (the other leases may be gone by then).
            let me = self.clone();
            let key = key.clone();
            self.tokio.spawn(async move {
                tokio::time::sleep(LEASE_RETRY).await;
                me.pump(&key);
            });
        }
        if let Some((queue, err)) = failed {
            if let Some(rt) = self.rt() {
                for q in queue {
                    let e = match &err {
                        Error::Infeasible {
                            reason,
                            request,
                            total,
                            ..
                        } => Error::Infeasible {
                            what: q.function.name.to_string(),
                            reason: reason.clone(),
                            request: request.clone(),
                            total: total.clone(),
                        },
                        e => e.clone(),
                    };
                    rt.complete_object(q.task.return_object(), Err(e));
                }
            }
        }
        self.pump(&key);
    }

    /// Asks the local node daemon for a lease; returns it with the link to
    /// the worker it names.
    pub(super) async fn lease(
        self: &Arc<Self>,
        resources: &[ResourceAmount],
        strategy: &WireStrategy,
        labels: &WireLabels,
        arg_bytes: Vec<ArgBytes>,
    ) -> Result<(TaskId, NodeId, Arc<Link>), Error> {
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
                        Err(e)
                    }
                }
            }
            Ok(NodeReply::LeaseInfeasible(LeaseInfeasible { reason })) => Err(Error::Infeasible {
                what: String::new(),
                reason,
                request: Box::new(resources_from_wire(resources)),
                total: Box::new(ray_sched::ResourceSet::new()),
            }),
            Err(Message::Error { reason }) => {
                Err(Error::cluster(format!("lease refused: {reason}")))
            }
            other => {
                let other = other.map_or_else(|message| message, Message::from);
                Err(Error::cluster(format!(
                    "unexpected answer to a lease request: {other:?}"
                )))
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

    /// Returns leases idle for longer than [`LEASE_IDLE`].
    pub(super) async fn reap_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(LEASE_IDLE / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.rt().is_none() {
                return;
            }
            let now = Instant::now();
            let mut expired = Vec::new();
            {
                let mut st = self.owner.lock();
                st.keys.retain(|_, ks| {
                    if ks.queue.is_empty() {
                        take_idle(ks, now, LEASE_IDLE, &mut expired);
                    }
                    !(ks.queue.is_empty() && ks.leases.is_empty() && ks.requesting == 0)
                });
            }
            for (node, lease) in expired {
                self.return_lease(node, lease);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(
        _: &[ObjectBuffer],
    ) -> Result<crate::registry::Returned, crate::registry::InvokeError> {
        unreachable!("the lease tests queue work but never run it")
    }

    static QUEUED_FN: RemoteFunction = RemoteFunction {
        id: ray_proto::FunctionId(1),
        name: "queued",
        invoke: never,
    };

    fn key(strategy: WireStrategy) -> SchedKey {
        SchedKey {
            resources: Vec::new(),
            strategy,
            labels: WireLabels::default(),
        }
    }

    /// A queued no-op task of this owner.
    fn queued(seq: u64) -> Queued {
        Queued {
            task: TaskId::new(WorkerId(1), seq),
            function: &QUEUED_FN,
            args: Vec::new(),
            keep: Vec::new(),
            attempt: 0,
            max_retries: 0,
            retry_exceptions: false,
            parent: None,
            arg_bytes: Vec::new(),
        }
    }

    fn lease(seq: u64, inflight: usize, idle_for: Option<Duration>) -> Lease {
        let (tx, _) = mpsc::unbounded_channel();
        Lease {
            id: TaskId::new(WorkerId(1), seq),
            node: NodeId(7),
            link: Arc::new(Link {
                addr: "127.0.0.1:1".parse().unwrap(),
                node: NodeId(7),
                worker: WorkerId(2),
                tx,
                dead: false.into(),
            }),
            inflight,
            idle_since: idle_for.map(|d| Instant::now() - d),
            busy_from: None,
        }
    }

    #[test]
    fn idle_leases_of_other_shapes_go_back_while_work_waits_for_a_lease() {
        let spread = key(WireStrategy::Spread);
        let default = key(WireStrategy::Default);
        let mut st = OwnerState::default();
        st.keys.insert(
            spread.clone(),
            KeyState {
                leases: vec![
                    lease(1, 0, Some(Duration::from_millis(20))),
                    lease(2, 1, None),
                    lease(3, 0, Some(Duration::ZERO)),
                ],
                ..KeyState::default()
            },
        );
        assert!(!st.others_waiting(&spread), "nothing is queued yet");
        assert!(
            st.take_idle_leases_of_others(&spread).is_empty(),
            "a key never gives back its own leases this way"
        );
        st.keys
            .entry(default.clone())
            .or_default()
            .queue
            .push_back(queued(10));
        assert!(st.others_waiting(&spread), "default work waits");
        assert!(!st.others_waiting(&default), "only its own work waits");
        let back = st.take_idle_leases_of_others(&default);
        assert_eq!(
            back,
            vec![(NodeId(7), TaskId::new(WorkerId(1), 1))],
            "only the lease idle for more than {LEASE_IDLE_WHILE_OTHERS_WAIT:?} goes back"
        );
        let kept: Vec<u64> = st.keys[&spread].leases.iter().map(|l| l.id.seq).collect();
        assert_eq!(kept, vec![2, 3], "the busy and the just-idled lease stay");
        // A key with work of its own queued keeps its idle leases.
        st.keys
            .get_mut(&spread)
            .unwrap()
            .leases
            .push(lease(4, 0, Some(Duration::from_millis(20))));
        st.keys
            .get_mut(&spread)
            .unwrap()
            .queue
            .push_back(queued(11));
        assert!(st.take_idle_leases_of_others(&default).is_empty());
    }
}
