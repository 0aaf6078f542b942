//! The worker side: streams of pushed work accepted from owners, each item
//! run through this process's runtime as a local task or actor call, and
//! its outcome forwarded back ([`Forward`]); objects served to borrowers.

use ray_proto::wire::{AddBorrowers, BorrowersAdded, RefsRemoved, WireRef};

use super::*;

/// What forwarding one pushed task's outcome needs.
pub(super) struct ForwardState {
    pub(super) core: Arc<ClusterCore>,
    /// The task's local return object (holding it keeps the entry).
    pub(super) handle: Arc<RefHandle>,
    /// The owner's id of the task.
    pub(super) task: TaskId,
    pub(super) results: mpsc::UnboundedSender<WorkResult>,
    /// The task's arguments borrowed from other processes (see
    /// [`ClusterCore::kept_unregistered`]).
    pub(super) borrowed: Vec<ObjectId>,
    /// A task run under a lease the worker's lease machine tracks (an
    /// actor call runs under its actor's lease, which it does not).
    pub(super) leased: bool,
}

/// Forwards a pushed task's outcome from the thread that completes its
/// return object: the object table wakes this waker, which sends the
/// result on. A tokio task per pushed task cost a spawn and a cross-thread
/// wake-up each, and its first poll spun up to 10 µs on the I/O thread
/// (the driver's get spin) for every task.
pub(super) struct Forward(Mutex<Option<ForwardState>>);

impl Forward {
    pub(super) fn start(state: ForwardState) {
        Arc::new(Forward(Mutex::new(Some(state)))).try_finish();
    }

    /// Finishes if the object is ready, else waits for the next wake.
    pub(super) fn try_finish(self: Arc<Self>) {
        let mut slot = self.0.lock();
        let Some(state) = slot.as_ref() else {
            // Already forwarded (a duplicate wake).
            return;
        };
        let rt = state.handle.rt.clone();
        let id = state.handle.id;
        let waker = std::task::Waker::from(self.clone());
        // The table wakes its waiters after releasing its lock, so holding
        // this slot's lock across `poll` cannot deadlock with `complete`.
        match state.handle.poll(Some(&waker)) {
            std::task::Poll::Pending => {}
            std::task::Poll::Ready(value) => {
                let Some(state) = slot.take() else { return };
                drop(slot);
                let out = rt.read_value(id, value);
                state.core.clone().finish_forward(state, out);
            }
        }
    }
}

impl std::task::Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.try_finish();
    }
}

impl ClusterCore {
    pub(super) async fn accept_loop(self: Arc<Self>) {
        while let Ok(conn) = self.endpoint.accept().await {
            let me = self.clone();
            let peer = conn.remote_address();
            self.tokio.spawn(async move {
                while let Ok((w, r)) = conn.accept_frames().await {
                    let me = me.clone();
                    me.tokio
                        .clone()
                        .spawn(async move { me.serve_stream(w, r, peer).await });
                }
            });
        }
    }

    pub(super) async fn serve_stream(
        self: Arc<Self>,
        mut w: FrameWriter,
        mut r: FrameReader,
        peer: SocketAddr,
    ) {
        let Ok(Some(first)) = r.recv().await else {
            return;
        };
        let request = match first.body {
            Message::Worker(request) => request,
            Message::Ping { seq } => {
                let _ = w.send(&Envelope::new(Message::Pong { seq })).await;
                w.finish();
                return;
            }
            _ => {
                let reply = Message::Error {
                    reason: "a data-plane stream must start with GetObject or WorkBatch".into(),
                };
                let _ = w.send(&Envelope::new(reply)).await;
                w.finish();
                return;
            }
        };
        match request {
            WorkerRequest::GetObject(GetObject { id, from, take }) => {
                self.serve_object(w, id, from, take, peer).await
            }
            WorkerRequest::AddBorrowers(AddBorrowers { borrower, ids }) => {
                let gone = self.borrowers_added(borrower, &ids);
                let _ = w.send(&Envelope::new(BorrowersAdded { gone }.into())).await;
                w.finish();
            }
            WorkerRequest::RefsRemoved(RefsRemoved { borrower, refs }) => {
                self.refs_removed(borrower, &refs);
                let _ = w.send(&Envelope::new(Message::Ok)).await;
                w.finish();
            }
            WorkerRequest::ObjectsFreed(ObjectsFreed { ids }) => {
                let forgotten = self.fetched.lock().forget(&ids);
                drop(forgotten);
                let _ = w.send(&Envelope::new(Message::Ok)).await;
                w.finish();
            }
            WorkerRequest::WorkBatch(WorkBatch { items }) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let writer = self.tokio.spawn(send_batches(
                    w,
                    rx,
                    |results| WorkDone { results }.into(),
                    WorkResult::inline_bytes,
                ));
                for item in items {
                    self.execute(item, &tx);
                }
                while let Ok(Some(env)) = r.recv().await {
                    match env.body {
                        Message::Worker(WorkerRequest::WorkBatch(WorkBatch { items })) => {
                            for item in items {
                                self.execute(item, &tx);
                            }
                        }
                        _ => break,
                    }
                }
                drop(tx);
                let _ = writer.await;
            }
            WorkerRequest::ListTasks(ListTasks) => {
                let reply = state::tasks(&self);
                let _ = w.send(&Envelope::new(reply.into())).await;
                w.finish();
            }
            WorkerRequest::ListObjects(ListObjects) => {
                let reply = state::objects(&self);
                let _ = w.send(&Envelope::new(reply.into())).await;
                w.finish();
            }
            WorkerRequest::WorkerDied(WorkerDied {
                worker,
                node,
                pid,
                status,
            }) => {
                self.worker_died(worker, node, pid, status);
                let _ = w.send(&Envelope::new(Message::Ok)).await;
                w.finish();
            }
        }
    }

    pub(super) async fn serve_object(
        self: Arc<Self>,
        mut w: FrameWriter,
        id: ObjectId,
        from: WorkerId,
        take: bool,
        peer: SocketAddr,
    ) {
        let held = if take {
            crate::cluster::testing::maybe_abort_on_take();
            self.held.lock().remove(&id)
        } else {
            self.held.lock().get(&id).cloned()
        };
        // A kept result's refs went with its result; an object's own are
        // lent to the asking process before its bytes go.
        let out = match held {
            Some(buf) => Ok((buf, Vec::new())),
            None => match self.rt().and_then(|rt| rt.objects.handle(id)) {
                Some(h) => {
                    let cell = h.cell.clone();
                    match ObjectRef::<()>::from_handle(h).buffer().await {
                        // Its refs are known once it has its value.
                        Ok(buf) => {
                            let nested = cell.contained();
                            self.lend_wire(from, nested).await.map(|refs| (buf, refs))
                        }
                        Err(e) => Err(e),
                    }
                }
                None => Err(Error::ObjectLost {
                    object: id,
                    cause: "no reference to it remains at its owner".into(),
                }),
            },
        };
        match out {
            Ok((buf, refs)) => {
                // Noted before sending: the peer's copy exists from now on.
                if !take && buf.len() >= FREE_NOTICE_MIN {
                    self.note_served(id, peer);
                }
                let head = ObjectFollows {
                    len: buf.len() as u64,
                    refs,
                };
                if w.send(&Envelope::new(head.into())).await.is_ok() {
                    let _ = w.send_shared(buf).await;
                }
            }
            Err(e) => {
                let failed = ObjectFailed {
                    error: error_to_wire(&e),
                };
                let _ = w.send(&Envelope::new(failed.into())).await;
            }
        }
        w.finish();
    }

    /// Runs one pushed work item through this process's runtime.
    pub(super) fn execute(
        self: &Arc<Self>,
        item: WorkItem,
        results: &mpsc::UnboundedSender<WorkResult>,
    ) {
        let Some(rt) = self.rt() else { return };
        let fail = |task: TaskId, e: Error| {
            let _ = results.send(WorkResult {
                task,
                outcome: WireOutcome::Failed(error_to_wire(&e)),
                refs: Vec::new(),
            });
        };
        match item {
            WorkItem::Task {
                task,
                function,
                args,
                lease,
                resources,
                attempt,
                max_retries,
                retry_exceptions,
                retry_on,
                parent,
                parent_span,
            } => {
                let Some(f) = registry().function(function) else {
                    return fail(task, missing(function.0, "remote function"));
                };
                let (args, borrowed) = self.args_from_wire(&rt, args);
                let local = rt.new_task_id();
                let handle = match rt.pending_return(local) {
                    Ok(h) => h,
                    Err(e) => return fail(task, e),
                };
                self.leases.lock().task_started(local, lease);
                rt.enqueue_task(TaskSpec {
                    task: local,
                    function: f,
                    args,
                    resources: resources_from_wire(&resources),
                    pool: Pool::Node,
                    max_retries,
                    retry_exceptions: crate::options::RetryExceptions::from_wire(
                        retry_exceptions,
                        retry_on,
                    ),
                    attempt,
                    parent,
                    parent_span,
                    trace: Some(task),
                    ret: Some(handle.cell.clone()),
                });
                self.forward(handle, task, results.clone(), borrowed, true);
            }
            WorkItem::CreateActor {
                actor,
                class,
                args,
                lease,
                resources,
                max_concurrency,
                detached,
                creator,
            } => {
                let creation = TaskId::new(actor.owner, actor.seq);
                if detached {
                    // Before the creation is answered: by the time the
                    // owner can end its job, the node keeps this worker.
                    let me = self.clone();
                    self.tokio.spawn(async move {
                        let _ = me.ask(me.local_node, DetachLease { lease }).await;
                    });
                }
                let Some(cls) = registry().actor_class(class) else {
                    return fail(creation, missing(class.0, "actor class"));
                };
                let (args, borrowed) = self.args_from_wire(&rt, args);
                let opts = ActorOptions {
                    resources: ResourceRequest::from_set(resources_from_wire(&resources)),
                    max_concurrency: max_concurrency.max(1) as usize,
                    ..ActorOptions::default()
                };
                match crate::actor::spawn_actor_as(&rt, actor, cls, args, opts, creator) {
                    Ok((cell, created)) => {
                        let mut st = self.leases.lock();
                        let replaced = st.actor_hosted(actor, lease, cell);
                        self.lease_actions(st);
                        drop(replaced);
                        let results = results.clone();
                        let me = self.clone();
                        self.tokio.spawn(async move {
                            let created = created.await;
                            // Arguments the actor kept in its state are
                            // registered before its owner lets them go.
                            if let Some(rt) = me.rt() {
                                let kept = me.kept_unregistered(&rt, &borrowed);
                                me.keep_borrowed(kept).await;
                            }
                            let outcome = match created {
                                Ok(Ok(())) => WireOutcome::Value(Vec::new()),
                                // `Error::ActorDied` of this actor and class.
                                Ok(Err(died)) => {
                                    me.drop_hosted(actor);
                                    WireOutcome::Failed(error_to_wire(&died))
                                }
                                Err(_) => WireOutcome::Failed(error_to_wire(&Error::ShutDown)),
                            };
                            let _ = results.send(WorkResult {
                                task: creation,
                                outcome,
                                refs: Vec::new(),
                            });
                        });
                    }
                    Err(e) => fail(creation, e),
                }
            }
            WorkItem::ActorCall {
                task,
                actor,
                method,
                args,
                parent,
                parent_span,
                attempt,
            } => {
                let Some(m) = registry().actor_method(method) else {
                    return fail(task, missing(method.0, "actor method"));
                };
                let cell = self.leases.lock().actor(actor).cloned();
                let Some(cell) = cell else {
                    return fail(
                        task,
                        Error::ActorDied {
                            actor,
                            class: "",
                            cause: "it does not live on this worker (dead or killed)".into(),
                        },
                    );
                };
                let (args, borrowed) = self.args_from_wire(&rt, args);
                match cell.call_pushed(m, args, task, (parent, parent_span), attempt) {
                    Ok(handle) => self.forward(handle, task, results.clone(), borrowed, false),
                    Err(e) => fail(task, e),
                }
            }
            WorkItem::KillActor { actor } => {
                if let Some(cell) = self.drop_hosted(actor) {
                    cell.fail(crate::actor::KILLED.into());
                }
            }
        }
    }

    /// Forgets a hosted actor and gives its lease back to the node.
    pub(super) fn drop_hosted(self: &Arc<Self>, actor: ActorId) -> Option<Arc<ActorCell>> {
        let mut st = self.leases.lock();
        let cell = st.actor_gone(actor);
        self.lease_actions(st);
        cell
    }

    /// Sends the local result of pushed work back to its owner as `task`
    /// (`leased`: a task under a lease the lease machine tracks).
    pub(super) fn forward(
        self: &Arc<Self>,
        handle: Arc<RefHandle>,
        task: TaskId,
        results: mpsc::UnboundedSender<WorkResult>,
        borrowed: Vec<ObjectId>,
        leased: bool,
    ) {
        Forward::start(ForwardState {
            core: self.clone(),
            handle,
            task,
            results,
            borrowed,
            leased,
        });
    }

    /// The outcome of a pushed task whose local return object `handle`
    /// completed with `out`, sent to its owner. Refs in the value are lent
    /// to the owner first, and arguments this process kept are registered
    /// with their owners: at once when this process owns them all (the
    /// common case), else from the I/O runtime, the result waiting.
    pub(super) fn finish_forward(
        self: &Arc<Self>,
        f: ForwardState,
        out: Result<ObjectBuffer, Error>,
    ) {
        let Some(rt) = self.rt() else { return };
        if f.leased {
            let local = f.handle.id;
            let mut st = self.leases.lock();
            st.task_ended(TaskId::new(local.owner, local.seq));
            self.lease_actions(st);
        }
        let nested = match &out {
            Ok(_) => f.handle.take_contained(),
            Err(_) => Vec::new(),
        };
        let kept = match f.borrowed.is_empty() {
            true => Vec::new(),
            false => self.kept_unregistered(&rt, &f.borrowed),
        };
        if kept.is_empty() && nested.is_empty() {
            self.send_result(&rt, f, out, Vec::new());
            return;
        }
        if kept.is_empty() && self.lends_at_once(&nested) {
            if let Some(refs) = self.wire_refs_now(&nested) {
                self.lend_now(f.task.owner, &nested);
                self.send_result(&rt, f, out, refs);
                return;
            }
        }
        let me = self.clone();
        self.tokio.spawn(async move {
            me.keep_borrowed(kept).await;
            let refs = match me.lend_wire(f.task.owner, nested).await {
                Ok(refs) => refs,
                Err(e) => return me.send_result(&rt, f, Err(e), Vec::new()),
            };
            me.send_result(&rt, f, out, refs);
        });
    }

    /// Lends `refs` to `to` and gives them in wire form, less those found
    /// gone (they travel as plain ids).
    pub(super) async fn lend_wire(
        self: &Arc<Self>,
        to: WorkerId,
        refs: Vec<Arc<RefHandle>>,
    ) -> Result<Vec<WireRef>, Error> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let mut wire = self.wire_refs(&refs).await?;
        let gone = self.lend(to, &refs).await;
        if !gone.is_empty() {
            wire.retain(|r| !gone.contains(&r.id));
        }
        Ok(wire)
    }

    fn send_result(
        &self,
        rt: &Runtime,
        f: ForwardState,
        out: Result<ObjectBuffer, Error>,
        refs: Vec<WireRef>,
    ) {
        let outcome = match out {
            Ok(buf) if buf.len() <= rt.settings.max_inline_bytes => {
                WireOutcome::Value(buf.as_bytes().to_vec())
            }
            Ok(buf) => {
                let len = buf.len() as u64;
                self.held.lock().insert(f.task.return_object(), buf);
                WireOutcome::Stored { len }
            }
            Err(e) => WireOutcome::Failed(error_to_wire(&e)),
        };
        let task = f.task;
        let _ = f.results.send(WorkResult {
            task,
            outcome,
            refs,
        });
    }

    /// `args` as this process's task arguments, and the ids of the refs
    /// nested in them that are borrowed from other processes (what the
    /// task may keep).
    pub(super) fn args_from_wire(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        args: Vec<WireArg>,
    ) -> (Vec<TaskArg>, Vec<ObjectId>) {
        let mut borrowed = Vec::new();
        let args = args
            .into_iter()
            .map(|a| match a {
                WireArg::Value(bytes) => TaskArg(ArgKind::Value(
                    ObjectBuffer::from_aligned(aligned(&bytes)),
                    Vec::new(),
                )),
                WireArg::Nested { bytes, refs } => {
                    let nested = self.receive_refs(rt, refs, false);
                    let foreign = nested.iter().filter(|h| h.id.owner != rt.worker);
                    borrowed.extend(foreign.map(|h| h.id));
                    TaskArg(ArgKind::Value(
                        ObjectBuffer::from_aligned(aligned(&bytes)),
                        nested,
                    ))
                }
                // Resolved to its value before the task runs: the task
                // never holds the ref itself, so it cannot keep it.
                WireArg::Ref { id, owner } => {
                    let h = match id.owner == rt.worker {
                        true => rt.objects.handle(id),
                        false => None,
                    };
                    TaskArg(ArgKind::Ref(
                        h.unwrap_or_else(|| self.borrow(rt, id, Some(owner))),
                    ))
                }
            })
            .collect();
        (args, borrowed)
    }
}
