//! The worker side: streams of pushed work accepted from owners, each item
//! run through this process's runtime as a local task or actor call, and
//! its outcome forwarded back ([`Forward`]); objects served to borrowers.

use super::*;

/// An actor hosted by this worker process.
pub(super) struct Hosted {
    pub(super) cell: Arc<ActorCell>,
    pub(super) lease: TaskId,
}

/// What forwarding one pushed task's outcome needs.
pub(super) struct ForwardState {
    pub(super) core: Arc<ClusterCore>,
    /// The task's local return object (holding it keeps the entry).
    pub(super) handle: Arc<RefHandle>,
    /// The owner's id of the task.
    pub(super) task: TaskId,
    pub(super) results: mpsc::UnboundedSender<WorkResult>,
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
            WorkerRequest::GetObject(GetObject { id, take }) => {
                self.serve_object(w, id, take, peer).await
            }
            WorkerRequest::ObjectsFreed(ObjectsFreed { ids }) => {
                let forgotten = self.fetched.lock().forget(&ids);
                drop(forgotten);
                let _ = w.send(&Envelope::new(Message::Ok)).await;
                w.finish();
            }
            WorkerRequest::WorkBatch(WorkBatch { items }) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let writer = self
                    .tokio
                    .spawn(send_batches(w, rx, |results| WorkDone { results }.into()));
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
        take: bool,
        peer: SocketAddr,
    ) {
        let held = if take {
            crate::cluster::testing::maybe_abort_on_take();
            self.held.lock().remove(&id)
        } else {
            self.held.lock().get(&id).cloned()
        };
        let out = match held {
            Some(buf) => Ok(buf),
            None => match self.rt().and_then(|rt| rt.objects.handle(id)) {
                Some(h) => ObjectRef::<()>::from_handle(h).buffer().await,
                None => Err(Error::ObjectLost {
                    object: id,
                    cause: "no reference to it remains at its owner".into(),
                }),
            },
        };
        match out {
            Ok(buf) => {
                // Noted before sending: the peer's copy exists from now on.
                if !take && buf.len() >= FREE_NOTICE_MIN {
                    self.note_served(id, peer);
                }
                let head = ObjectFollows {
                    len: buf.len() as u64,
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
            } => {
                let Some(f) = registry().function(function) else {
                    return fail(task, missing(function.0, "remote function"));
                };
                let args = self.args_from_wire(&rt, args);
                let local = rt.new_task_id();
                let handle = match rt.pending_return(local) {
                    Ok(h) => h,
                    Err(e) => return fail(task, e),
                };
                self.lease_of.lock().insert(local, lease);
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
                    trace: Some(task),
                    ret: Some(handle.cell.clone()),
                });
                self.forward(handle, task, results.clone());
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
                let args = self.args_from_wire(&rt, args);
                let opts = ActorOptions {
                    resources: ResourceRequest::from_set(resources_from_wire(&resources)),
                    max_concurrency: max_concurrency.max(1) as usize,
                    ..ActorOptions::default()
                };
                match crate::actor::spawn_actor_as(&rt, actor, cls, args, opts, creator) {
                    Ok((cell, created)) => {
                        self.hosted.lock().insert(actor, Hosted { cell, lease });
                        let results = results.clone();
                        let me = self.clone();
                        self.tokio.spawn(async move {
                            let outcome = match created.await {
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
            } => {
                let Some(m) = registry().actor_method(method) else {
                    return fail(task, missing(method.0, "actor method"));
                };
                let cell = self.hosted.lock().get(&actor).map(|h| h.cell.clone());
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
                let args = self.args_from_wire(&rt, args);
                match cell.call_pushed(m, args, task, parent) {
                    Ok(handle) => self.forward(handle, task, results.clone()),
                    Err(e) => fail(task, e),
                }
            }
            WorkItem::KillActor { actor } => {
                if let Some(cell) = self.drop_hosted(actor) {
                    cell.fail("killed by its owner".into());
                }
            }
        }
    }

    /// Forgets a hosted actor and gives its lease back to the node.
    pub(super) fn drop_hosted(self: &Arc<Self>, actor: ActorId) -> Option<Arc<ActorCell>> {
        let h = self.hosted.lock().remove(&actor)?;
        let me = self.clone();
        let lease = h.lease;
        self.tokio.spawn(async move {
            let _ = me.ask(me.local_node, ReturnLease { lease }).await;
        });
        Some(h.cell)
    }

    /// Sends the local result of pushed work back to its owner as `task`.
    pub(super) fn forward(
        self: &Arc<Self>,
        handle: Arc<RefHandle>,
        task: TaskId,
        results: mpsc::UnboundedSender<WorkResult>,
    ) {
        Forward::start(ForwardState {
            core: self.clone(),
            handle,
            task,
            results,
        });
    }

    /// The outcome of a pushed task whose local return object `handle`
    /// completed with `out`, sent to its owner.
    pub(super) fn finish_forward(&self, f: ForwardState, out: Result<ObjectBuffer, Error>) {
        let ForwardState {
            handle,
            task,
            results,
            ..
        } = f;
        let Some(rt) = self.rt() else { return };
        let local = handle.id;
        self.lease_of
            .lock()
            .remove(&TaskId::new(local.owner, local.seq));
        self.pin(&rt.objects.take_contained(local));
        let outcome = match out {
            Ok(buf) if buf.len() <= rt.settings.max_inline_bytes => {
                WireOutcome::Value(buf.as_bytes().to_vec())
            }
            Ok(buf) => {
                let len = buf.len() as u64;
                self.held.lock().insert(task.return_object(), buf);
                WireOutcome::Stored { len }
            }
            Err(e) => WireOutcome::Failed(error_to_wire(&e)),
        };
        let _ = results.send(WorkResult { task, outcome });
    }

    pub(super) fn args_from_wire(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        args: Vec<WireArg>,
    ) -> Vec<TaskArg> {
        args.into_iter()
            .map(|a| match a {
                WireArg::Value(bytes) => TaskArg(ArgKind::Value(
                    ObjectBuffer::from_aligned(aligned(&bytes)),
                    Vec::new(),
                )),
                WireArg::Ref { id, owner } => {
                    let h = if id.owner == rt.worker {
                        rt.objects
                            .handle(id)
                            .unwrap_or_else(|| self.borrow(rt, id, Some(owner)))
                    } else {
                        self.borrow(rt, id, Some(owner))
                    };
                    TaskArg(ArgKind::Ref(h))
                }
            })
            .collect()
    }
}
