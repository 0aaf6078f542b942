//! Pushing work to a worker and taking its results: one framed stream per
//! worker process ([`Link`]), results completed into the owner's table,
//! everything in flight on a lost link failed with `NodeDied`.

use super::*;

/// How long a failed take of a task's value waits for the precise cause
/// of its worker's death before failing with the transfer's error.
const CAUSE_WAIT: Duration = Duration::from_secs(1);

/// What a result answers.
pub(super) enum Done {
    Task(Queued),
    Actor(Inflight),
}

/// A work stream to one worker process.
pub(crate) struct Link {
    pub(super) addr: SocketAddr,
    pub(super) node: NodeId,
    pub(super) worker: WorkerId,
    pub(super) tx: mpsc::UnboundedSender<WorkItem>,
    /// Set (before the inflight scan) when the link is lost: work pushed
    /// after that fails at once instead of waiting for an answer.
    pub(super) dead: std::sync::atomic::AtomicBool,
    /// Why it was lost (set with `dead`).
    pub(super) cause: Mutex<Option<Error>>,
    /// Wakes those waiting for its loss.
    pub(super) gone: tokio::sync::Notify,
}

impl Link {
    pub(super) fn new(
        addr: SocketAddr,
        node: NodeId,
        worker: WorkerId,
        tx: mpsc::UnboundedSender<WorkItem>,
    ) -> Self {
        Self {
            addr,
            node,
            worker,
            tx,
            dead: false.into(),
            cause: Mutex::new(None),
            gone: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once the link is lost, with why.
    pub(super) async fn lost(&self) -> Error {
        loop {
            let notified = self.gone.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_dead() {
                return self.cause.lock().clone().unwrap_or(Error::NodeDied {
                    node: self.node,
                    cause: format!("its worker at {} is gone", self.addr),
                });
            }
            notified.await;
        }
    }
}

/// Sends what arrives on `rx` as batch frames of up to [`BATCH_ITEMS`]
/// items or [`BATCH_BYTES`] of their inline values, as `weight` counts
/// them (`batch` wraps them in a message): whatever queued while a frame was
/// being sent goes in the next one. Both directions of a work stream run
/// it: pushed [`WorkItem`]s to a worker, [`WorkResult`]s back to the owner.
pub(super) async fn send_batches<T>(
    mut w: FrameWriter,
    mut rx: mpsc::UnboundedReceiver<T>,
    batch: fn(Vec<T>) -> Message,
    weight: fn(&T) -> usize,
) {
    while let Some(first) = rx.recv().await {
        // Sized for what is queued: growing from one item, push by push,
        // reallocated a busy worker's batch several times a frame.
        let mut items = Vec::with_capacity(BATCH_ITEMS.min(rx.len() + 1));
        let mut bytes = weight(&first);
        items.push(first);
        while items.len() < BATCH_ITEMS && bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(i) => {
                    bytes += weight(&i);
                    items.push(i);
                }
                Err(_) => break,
            }
        }
        if w.send(&Envelope::new(batch(items))).await.is_err() {
            return;
        }
    }
    w.finish();
}

impl ClusterCore {
    pub(in crate::cluster) async fn node_addr(&self, node: NodeId) -> Result<SocketAddr, Error> {
        if let Some(a) = self.node_addrs.lock().get(&node) {
            return Ok(*a);
        }
        let nodes = self.gcs.nodes().await.map_err(Error::cluster_source)?;
        let mut map = self.node_addrs.lock();
        for n in nodes {
            if let Ok(a) = n.address.parse() {
                map.insert(n.id, a);
            }
        }
        map.get(&node).copied().ok_or(Error::NodeDied {
            node,
            cause: "not in the node table".into(),
        })
    }

    // ---------------------------------------------------------------
    // Owner: links and results
    // ---------------------------------------------------------------

    /// The work stream to the worker at `addr`, opened on first use.
    pub(super) async fn link(
        self: &Arc<Self>,
        addr: SocketAddr,
        node: NodeId,
        worker: WorkerId,
    ) -> Result<Arc<Link>, Error> {
        let cell = self.links.lock().entry(addr).or_default().clone();
        let me = self.clone();
        cell.get_or_try_init(|| async move {
            let conn = me.conns.get(addr).await.map_err(|e| Error::NodeDied {
                node,
                cause: format!("cannot reach its worker at {addr}: {e}"),
            })?;
            let (writer, reader) = conn.open_frames().await.map_err(|e| Error::NodeDied {
                node,
                cause: format!("cannot open a work stream to {addr}: {e}"),
            })?;
            let (tx, rx) = mpsc::unbounded_channel();
            let link = Arc::new(Link::new(addr, node, worker, tx));
            me.tokio.spawn(send_batches(
                writer,
                rx,
                |items| WorkBatch { items }.into(),
                WorkItem::inline_bytes,
            ));
            let me2 = me.clone();
            let watched = link.clone();
            me.tokio
                .spawn(async move { me2.read_results(watched, reader).await });
            Ok(link)
        })
        .await
        .cloned()
    }

    pub(super) async fn read_results(self: Arc<Self>, link: Arc<Link>, mut reader: FrameReader) {
        let addr = link.addr;
        let cause = loop {
            match reader.recv().await {
                Ok(Some(env)) => match env.body {
                    Message::WorkerReply(WorkerReply::WorkDone(WorkDone { results })) => {
                        self.on_results(&link, results)
                    }
                    other => break format!("unexpected message on a work stream: {other:?}"),
                },
                Ok(None) => break "the worker closed its work stream".to_string(),
                Err(e) => break format!("its worker at {addr} is unreachable: {e}"),
            }
        };
        let err = Error::NodeDied {
            node: link.node,
            cause,
        };
        self.link_died(&link, err);
    }

    /// Follows the GCS's node table: when a node is declared dead, every
    /// work stream to a worker there is lost at once (a stream to a dead
    /// host notices only when its connection times out). Runs until the
    /// runtime goes.
    pub(super) async fn follow_node_deaths(self: Arc<Self>) {
        use ray_proto::wire::{WireChannel, WireEvent};
        while self.rt().is_some() {
            let Ok(sub) = self.gcs.subscribe(vec![WireChannel::Node]).await else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let mut seen_dropped = 0;
            while self.rt().is_some() {
                let (events, dropped) =
                    match self.gcs.poll_events(sub, Duration::from_secs(1)).await {
                        Ok(polled) => polled,
                        Err(crate::cluster::ClusterError::Timeout { .. }) => continue,
                        Err(_) => break,
                    };
                let mut dead: Vec<(NodeId, String)> = events
                    .into_iter()
                    .filter_map(|e| match e {
                        WireEvent::Node(n) if !n.alive => {
                            Some((n.id, n.death_cause.unwrap_or_default()))
                        }
                        _ => None,
                    })
                    .collect();
                if dropped > seen_dropped {
                    // Some were lost: the table itself is the truth.
                    seen_dropped = dropped;
                    if let Ok(nodes) = self.gcs.nodes().await {
                        dead.extend(
                            nodes
                                .into_iter()
                                .filter(|n| !n.alive)
                                .map(|n| (n.id, n.death_cause.unwrap_or_default())),
                        );
                    }
                }
                for (node, cause) in dead {
                    self.node_died(node, cause);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `node` was declared dead: its work streams are lost, and bundles of
    /// this process's placement groups there are reserved again elsewhere.
    fn node_died(self: &Arc<Self>, node: NodeId, cause: String) {
        self.pg_node_died(node);
        let lost: Vec<Arc<Link>> = self
            .links
            .lock()
            .values()
            .filter_map(|cell| cell.get().cloned())
            .filter(|l| l.node == node && !l.is_dead())
            .collect();
        for link in lost {
            let err = Error::NodeDied {
                node,
                cause: format!("the GCS declared it dead: {cause}"),
            };
            self.link_died(&link, err);
        }
    }

    /// A node daemon saw `worker`'s process exit: every work stream to it
    /// is lost now, not when its connection times out.
    pub(super) fn worker_died(
        self: &Arc<Self>,
        worker: WorkerId,
        node: NodeId,
        pid: u32,
        status: String,
    ) {
        // Whatever it borrowed from this process goes with it.
        let counts = self.refs.lock().borrower_died(worker);
        drop(counts);
        let lost: Vec<Arc<Link>> = self
            .links
            .lock()
            .values()
            .filter_map(|cell| cell.get().cloned())
            .filter(|l| l.worker == worker)
            .collect();
        for link in lost {
            let err = Error::WorkerDied {
                worker,
                pid,
                node,
                status: status.clone(),
            };
            self.link_died(&link, err);
        }
    }

    pub(super) fn on_results(self: &Arc<Self>, link: &Arc<Link>, results: Vec<WorkResult>) {
        let Some(rt) = self.rt() else { return };
        let addr = link.addr;
        let worker = LinkRef(link.clone());
        let mut done = Vec::with_capacity(results.len());
        // Refs in the values were lent to this process: taken in (outside
        // the owner's lock) even for a late answer, whose drop then gives
        // them back.
        let mut results = results;
        let mut received: Vec<Vec<Arc<RefHandle>>> = Vec::new();
        if results.iter().any(|r| !r.refs.is_empty()) {
            received = results
                .iter_mut()
                .map(|r| self.receive_refs(&rt, std::mem::take(&mut r.refs), true))
                .collect();
        }
        let mut late = Vec::new();
        {
            let mut st = self.owner.lock();
            let now = Instant::now();
            for (i, r) in results.into_iter().enumerate() {
                let nested = received.get_mut(i).map(std::mem::take).unwrap_or_default();
                if matches!(r.outcome, WireOutcome::Stored { .. }) {
                    // A task's value waits at its worker: the task core
                    // keeps the task (its lineage) until the value is here.
                    if st.tasks.result_kept(r.task, &worker, now) {
                        self.take_result(&rt, link, r.task, nested);
                        continue;
                    }
                }
                if let Some(q) = st.tasks.result(r.task, &worker, now) {
                    done.push((r, Done::Task(q), nested));
                } else if let Some(f) = st.inflight.remove(&r.task) {
                    done.push((r, Done::Actor(f), nested));
                } else {
                    // A late answer of a task already retried or ended.
                    late.push(nested);
                }
            }
            self.drive(st);
        }
        drop(late);
        // Actors whose calls were answered, told once per run of answers.
        let mut answered: Vec<TaskId> = Vec::new();
        let mut answered_by: Option<Arc<RemoteActor>> = None;
        let mut tell = |actor: Option<Arc<RemoteActor>>, task: TaskId| {
            let Some(actor) = actor else { return };
            if answered_by
                .as_ref()
                .is_some_and(|a| !Arc::ptr_eq(a, &actor))
            {
                if let Some(a) = answered_by.take() {
                    a.answered_all(&answered);
                }
                answered.clear();
            }
            answered.push(task);
            answered_by = Some(actor);
        };
        for (r, d, nested) in done {
            match r.outcome {
                WireOutcome::Value(bytes) => {
                    let buf = ObjectBuffer::from_aligned(aligned(&bytes));
                    tell(self.end(&rt, r.task, d, Ok(buf), nested), r.task);
                }
                WireOutcome::Failed(e) => {
                    // A dead actor's worker may not know its class; its owner does.
                    let name = match (&d, e.kind) {
                        (Done::Actor(f), ErrorKind::ActorDied) => match f.kind {
                            InflightKind::ActorCall { class, .. } => class,
                            _ => f.name,
                        },
                        (Done::Actor(f), _) => f.name,
                        (Done::Task(q), _) => q.function.name,
                    };
                    let err = error_from_wire(e, name);
                    tell(self.end(&rt, r.task, d, Err(err), nested), r.task);
                }
                WireOutcome::Stored { .. } => {
                    // Until the value is here, the call counts as in
                    // flight (its machine hears of the answer after the
                    // take): its actor (and worker) must not go yet.
                    let me = self.clone();
                    let rt = rt.clone();
                    self.tokio.spawn(async move {
                        let out = me.fetch(addr, r.task.return_object(), true).await;
                        if let Some(actor) = me.end(&rt, r.task, d, out, nested) {
                            actor.answered(r.task);
                        }
                    });
                }
            }
        }
        if let Some(a) = answered_by {
            a.answered_all(&answered);
        }
    }

    /// Takes the value of `task`, kept by the worker behind `link`, into
    /// this process. If the worker dies with it first, the task core runs
    /// the task again within its retry budget: the value is made again the
    /// way it was made.
    fn take_result(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        link: &Arc<Link>,
        task: TaskId,
        nested: Vec<Arc<RefHandle>>,
    ) {
        let me = self.clone();
        let rt = rt.clone();
        let link = link.clone();
        self.tokio.spawn(async move {
            let out = tokio::select! {
                out = me.fetch(link.addr, task.return_object(), true) => out,
                lost = link.lost() => Err(lost),
            };
            // A transfer cut short is most likely its worker dying: wait a
            // little for the precise cause (its node's `WorkerDied`).
            let out = match out {
                Err(e) => match tokio::time::timeout(CAUSE_WAIT, link.lost()).await {
                    Ok(cause) => Err(cause),
                    Err(_) => Err(e),
                },
                ok => ok,
            };
            let mut st = me.owner.lock();
            match out {
                Ok(buf) => {
                    let q = st.tasks.taken(task);
                    me.drive(st);
                    if let Some(q) = q {
                        let _ = me.end(&rt, task, Done::Task(q), Ok(buf), nested);
                    }
                }
                Err(e) => {
                    st.tasks.take_failed(task, e, Instant::now());
                    me.drive(st);
                }
            }
        });
    }

    /// Completes what a result answered: a task's return object, or an
    /// actor call or creation. `nested`: the refs inside the value.
    #[must_use]
    fn end(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        done: Done,
        out: Result<ObjectBuffer, Error>,
        nested: Vec<Arc<RefHandle>>,
    ) -> Option<Arc<RemoteActor>> {
        match done {
            Done::Actor(f) => self.finish(rt, task, f, out, nested),
            Done::Task(q) => {
                let out = out.map(|buf| Encoded { buf, nested });
                rt.complete_object(task.return_object(), out);
                // Its argument refs go after the result is visible.
                drop(q);
                None
            }
        }
    }

    /// Completes actor work `f` with `out`; for a call, returns the actor
    /// whose machine must hear of the answer (told by the caller, once per
    /// batch of results).
    #[must_use]
    pub(super) fn finish(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        f: Inflight,
        out: Result<ObjectBuffer, Error>,
        nested: Vec<Arc<RefHandle>>,
    ) -> Option<Arc<RemoteActor>> {
        match f.kind {
            InflightKind::ActorCreate(done) => {
                let _ = done.send(out.map(|_| ()));
            }
            InflightKind::ActorCall { actor, .. } => {
                let out = out.map(|buf| Encoded { buf, nested });
                rt.complete_object(task.return_object(), out);
                return Some(actor);
            }
        }
        None
    }

    /// The link's worker is gone (its stream ended or broke): its tasks go
    /// back to the task core, which queues them again within their retry
    /// budget; actor work pushed on it fails with `NodeDied`.
    pub(super) fn link_died(self: &Arc<Self>, link: &Arc<Link>, err: Error) {
        let (addr, node) = (link.addr, link.node);
        // The first cause is the precise one (its node's `WorkerDied`, then
        // the stream ending): a later report does not replace it. Set before
        // `dead`, which `Link::lost` reads it after.
        link.cause.lock().get_or_insert_with(|| err.clone());
        if link.dead.swap(true, std::sync::atomic::Ordering::AcqRel) {
            // Told twice (its node's notice, then its reader ending).
            return;
        }
        link.gone.notify_waiters();
        {
            let mut links = self.links.lock();
            // Only this life of the link: a new one may already be open.
            let same = links
                .get(&addr)
                .and_then(|cell| cell.get())
                .is_some_and(|l| Arc::ptr_eq(l, link));
            if same {
                links.remove(&addr);
            }
        }
        let failed: Vec<(TaskId, Inflight)> = {
            let mut st = self.owner.lock();
            let pending = st.tasks.len();
            st.tasks
                .worker_lost(&LinkRef(link.clone()), err.clone(), Instant::now());
            let ids: Vec<TaskId> = st
                .inflight
                .iter()
                .filter(|(_, f)| f.link == addr)
                .map(|(id, _)| *id)
                .collect();
            let failed = ids
                .into_iter()
                .filter_map(|id| st.inflight.remove(&id).map(|f| (id, f)))
                .collect::<Vec<_>>();
            if pending > 0 || !failed.is_empty() {
                tracing::warn!(target: "ray::cluster", node = %node, %addr, cause = %err, actor_work = failed.len(), "worker.lost");
            }
            self.drive(st);
            failed
        };
        if let Some(rt) = self.rt() {
            for (task, f) in failed {
                self.lost(&rt, task, f, err.clone());
            }
        }
    }

    /// Actor work `f` was lost with its worker: a call of an actor that
    /// restarts may go to its next life; anything else fails with `err`.
    fn lost(&self, rt: &Arc<Runtime>, task: TaskId, f: Inflight, err: Error) {
        match &f.kind {
            InflightKind::ActorCall { actor, .. } => actor.clone().call_lost(task, f, &err),
            InflightKind::ActorCreate(_) => {
                let _ = self.finish(rt, task, f, Err(err), Vec::new());
            }
        }
    }

    /// Pushes one item on `link`, registered as inflight first; if the
    /// link is already lost the item fails at once. The check and the
    /// insert happen under the owner lock that `link_died` scans under, so
    /// every item is answered by its worker or failed exactly once.
    pub(super) fn push(
        self: &Arc<Self>,
        link: &Link,
        task: TaskId,
        f: Inflight,
        item: WorkItem,
    ) -> bool {
        let mut st = self.owner.lock();
        if link.is_dead() {
            drop(st);
            if let Some(rt) = self.rt() {
                let err = link.cause.lock().clone().unwrap_or(Error::NodeDied {
                    node: link.node,
                    cause: format!("its worker at {} is gone", link.addr),
                });
                self.lost(&rt, task, f, err);
            }
            return false;
        }
        st.inflight.insert(task, f);
        if matches!(item, WorkItem::Task { .. } | WorkItem::ActorCall { .. }) {
            tracing::trace!(
                name: "task.scheduled",
                target: "ray::task",
                task_id = task.as_u128(),
                node_id = link.node.0,
                worker_id = link.worker.0
            );
        }
        // Sent under the lock: items keep their order on the link.
        let _ = link.tx.send(item);
        true
    }

    // ---------------------------------------------------------------
    // Objects
    // ---------------------------------------------------------------
}
