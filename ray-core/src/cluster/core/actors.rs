//! Actors on a cluster, owner side: creating an actor on a leased worker,
//! the [`RemoteActor`] handle that forwards calls, adopting a handle that
//! arrived inside a value, and finding named actors through the GCS.

use super::*;

/// Messages to a remote actor's task.
/// What creating an actor on some worker needs, besides the actor.
pub(super) struct ActorLaunch {
    pub(super) args: Vec<TaskArg>,
    pub(super) resources: Vec<ResourceAmount>,
    pub(super) strategy: WireStrategy,
    pub(super) labels: super::owner::WireLabels,
    pub(super) max_concurrency: u32,
    pub(super) detached: bool,
    /// The creating task (`None`: the driver), for insight.
    pub(super) creator: Option<TaskId>,
    /// Restarts allowed (`RETRY_FOREVER`: no limit).
    pub(super) max_restarts: u32,
    /// Its own worker process on its node.
    pub(super) isolated: bool,
}

pub(crate) enum ActorMsg {
    Call {
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        /// The calling task (`None`: the driver), for insight.
        parent: Option<TaskId>,
    },
    Kill,
}

/// The owner's handle on an actor living in another process.
pub(crate) struct RemoteActor {
    pub(crate) id: ActorId,
    pub(crate) class: &'static ActorClass,
    pub(super) dead: Mutex<Option<String>>,
    /// A handle was serialized into a value that may reach another
    /// process: the actor then lives until its key (see [`actor_key`]) is
    /// freed, i.e. until this process's handles and every borrower's are
    /// gone, not only this process's.
    pub(super) escaped: std::sync::atomic::AtomicBool,
    /// It outlives its job: never killed for its handles going.
    pub(super) detached: bool,
    /// The owner's handle of an actor that restarts: its restart budget
    /// and how often a lost call is sent again. `None` for a borrowed
    /// handle (found by name or decoded) and for actors that never restart.
    pub(super) restarts: Option<Restarts>,
    /// Calls lost with a life of the actor, to send to the next one.
    pub(super) resend: Mutex<Vec<Resend>>,
    /// A kill asked for by something holding no handle (its placement
    /// group's removal), for the forwarder, which may have no channel
    /// left.
    pub(super) kill_now: tokio::sync::Notify,
    /// Its key was freed (no handle is left anywhere): the owner's
    /// forwarder kills it once the calls already sent are answered.
    pub(super) key_gone: tokio::sync::Notify,
    /// Set with `key_gone`'s notice, which is taken once: a supervisor
    /// that comes back after a restart still sees it.
    pub(super) key_is_gone: std::sync::atomic::AtomicBool,
}

/// How an actor restarts.
pub(super) struct Restarts {
    pub(super) max_task_retries: u32,
    /// Lives used up, from 0 (the GCS keeps the count; this mirrors it).
    pub(super) used: std::sync::atomic::AtomicU32,
    pub(super) max_restarts: u32,
}

impl Restarts {
    fn left(&self) -> bool {
        self.max_restarts == crate::options::RETRY_FOREVER
            || self.used.load(std::sync::atomic::Ordering::Acquire) < self.max_restarts
    }
}

/// A call lost with a life of its actor, to send again.
pub(super) struct Resend {
    task: TaskId,
    method: &'static ActorMethod,
    args: Vec<TaskArg>,
    parent: Option<TaskId>,
    attempt: u32,
}

/// What this process's handles to an actor hold: its state, and the
/// sender to the task forwarding its calls. The forwarder holds the state
/// but no sender, so when the last handle goes its channel closes and the
/// owner's forwarder kills the actor (unless a handle escaped into a
/// value), as Ray does when an actor's handles go out of scope.
pub(crate) struct HeldActor {
    pub(crate) actor: Arc<RemoteActor>,
    tx: mpsc::UnboundedSender<ActorMsg>,
    /// A hold on the actor's key object (see [`actor_key`]): what a handle
    /// inside a value lends, so the owner counts the processes holding
    /// handles. `None` for a handle found by name (not counted).
    pub(super) key: Option<Arc<RefHandle>>,
}

pub(crate) use crate::actor::{actor_key, actor_of_key};

impl HeldActor {
    /// A handle to `actor` (holding `key`) and the forwarder's end of its
    /// channel.
    pub(super) fn new(
        actor: RemoteActor,
        key: Option<Arc<RefHandle>>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ActorMsg>) {
        Self::with_state(Arc::new(actor), key)
    }

    /// A new handle (and channel) on an actor state already shared.
    pub(super) fn with_state(
        actor: Arc<RemoteActor>,
        key: Option<Arc<RefHandle>>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ActorMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(Self { actor, tx, key });
        (held, rx)
    }

    /// Queues a call; its result completes `task`'s return object.
    pub(crate) fn call(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        parent: Option<TaskId>,
    ) {
        let actor = &self.actor;
        let dead = actor.dead.lock().clone();
        if let Some(cause) = dead {
            rt.complete_object(task.return_object(), Err(actor.died(&cause)));
            return;
        }
        if let Err(mpsc::error::SendError(ActorMsg::Call { task, .. })) =
            self.tx.send(ActorMsg::Call {
                task,
                method,
                args,
                parent,
            })
        {
            rt.complete_object(task.return_object(), Err(actor.died("its owner stopped")));
        }
    }

    /// Kills the actor: calls made from now on fail with `ActorDied`
    /// ("killed by its owner"), as embedded.
    pub(crate) fn kill(&self) {
        self.actor.set_dead("killed by its owner".into());
        let _ = self.tx.send(ActorMsg::Kill);
    }
}

impl RemoteActor {
    pub(super) fn new(id: ActorId, class: &'static ActorClass) -> Self {
        Self {
            id,
            class,
            dead: Mutex::new(None),
            escaped: false.into(),
            detached: false,
            restarts: None,
            resend: Mutex::new(Vec::new()),
            kill_now: tokio::sync::Notify::new(),
            key_gone: tokio::sync::Notify::new(),
            key_is_gone: false.into(),
        }
    }

    /// A call pushed to this actor was lost with its worker (`err`): it
    /// is sent to the actor's next life if it restarts and the call has
    /// `max_task_retries` left; it fails with `ActorUnavailable` if the
    /// actor restarts without it; else with `err`.
    pub(super) fn call_lost(&self, rt: &Arc<Runtime>, task: TaskId, f: Inflight, err: Error) {
        let restarts = self.restarts.as_ref().filter(|r| r.left());
        let dead = self.dead.lock().is_some();
        let (
            Some(r),
            false,
            InflightKind::ActorCall {
                method,
                parent,
                attempt,
                ..
            },
        ) = (restarts, dead, &f.kind)
        else {
            // Dead for good: `ActorDied`, with what was seen as its cause
            // (its process exited, its node died), or why it was killed.
            let cause = self
                .dead
                .lock()
                .clone()
                .unwrap_or_else(|| match &self.restarts {
                    Some(r) => format!(
                        "its restarts are used up ({}); last: {err}",
                        r.used.load(std::sync::atomic::Ordering::Acquire)
                    ),
                    None => err.to_string(),
                });
            rt.complete_object(task.return_object(), Err(self.died(&cause)));
            return;
        };
        if r.max_task_retries == crate::options::RETRY_FOREVER || *attempt < r.max_task_retries {
            self.resend.lock().push(Resend {
                task,
                method,
                args: f.args,
                parent: *parent,
                attempt: attempt + 1,
            });
            return;
        }
        let e = Error::ActorUnavailable {
            actor: self.id,
            class: self.class.name,
            cause: err.to_string(),
        };
        rt.complete_object(task.return_object(), Err(e));
    }

    /// Marks the actor as reachable from elsewhere (see `escaped`).
    pub(crate) fn escape(&self) {
        self.escaped
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Its key object was freed here, its owner: no handle is left
    /// anywhere, so an actor whose handle escaped goes now (one that did
    /// not went with its owner's last handle).
    pub(super) fn key_freed(&self) {
        let escaped = self.escaped.load(std::sync::atomic::Ordering::Acquire);
        if escaped && !self.detached {
            self.key_is_gone
                .store(true, std::sync::atomic::Ordering::Release);
            self.key_gone.notify_one();
        }
    }

    pub(super) fn died(&self, cause: &str) -> Error {
        Error::ActorDied {
            actor: self.id,
            class: self.class.name,
            cause: cause.to_string(),
        }
    }

    /// Kills the actor from outside its handles (see `kill_now`).
    pub(crate) fn request_kill(&self) {
        self.set_dead("killed by its owner".into());
        self.kill_now.notify_one();
    }

    pub(super) fn set_dead(&self, cause: String) {
        self.dead.lock().get_or_insert(cause);
    }
}

/// Why an actor is dead, from the error that ended it: an `ActorDied`'s
/// own cause, or the error itself.
fn death_cause(e: Error) -> String {
    match e {
        Error::ActorDied { cause, .. } => cause,
        e => e.to_string(),
    }
}

/// Records a handle in the by-id map; entries whose handles are all gone
/// are swept whenever the map doubles, so it stays proportional to the
/// live handles.
pub(super) fn remember_actor(actors: &mut HashMap<ActorId, KnownActor>, held: &Arc<HeldActor>) {
    if actors.len() >= 64 && actors.len().is_power_of_two() {
        actors.retain(|_, a| a.state.strong_count() > 0);
    }
    let known = KnownActor {
        handles: Arc::downgrade(held),
        state: Arc::downgrade(&held.actor),
    };
    actors.insert(held.actor.id, known);
}

/// An actor this process has handles to, in the by-id map: the handles
/// (a decoded handle joins them while they live) and the state, which its
/// forwarder keeps while it supervises the actor (calls lost with a life
/// are sent to the next one even after the handles are gone).
pub(crate) struct KnownActor {
    pub(super) handles: Weak<HeldActor>,
    pub(super) state: Weak<RemoteActor>,
}

impl ClusterCore {
    /// Creates an actor somewhere in the cluster; calls queue until it lives.
    pub(crate) fn spawn_actor(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        class: &'static ActorClass,
        args: Vec<TaskArg>,
        opts: &ActorOptions,
    ) -> crate::Result<Arc<HeldActor>> {
        let request = opts.validate()?;
        self.check_feasible(
            class.name,
            request,
            &opts.resources.strategy,
            &opts.resources.labels,
        )?;
        let namespace = opts
            .namespace
            .clone()
            .unwrap_or_else(|| rt.settings.namespace.clone());
        if let Some(name) = &opts.name {
            // A name held by a live actor fails here, at create, as it does
            // embedded. (Two creators racing for a free name both pass; the
            // GCS registers the first and the other dies with the reason.)
            // It blocks this thread for one GCS round trip, as Ray's
            // creation of a named actor does.
            let gcs = self.gcs.clone();
            let (ns, n) = (namespace.clone(), name.clone());
            // A current-thread tokio runtime cannot wait for the GCS here:
            // the name is then checked only when the GCS registers the
            // actor (a taken one makes its calls fail with `ActorDied`).
            let held = super::remote::block_on_cluster(&self.tokio, async move {
                gcs.lookup_actor(&ns, &n).await
            });
            if let Ok(Ok(holder)) = held {
                return Err(Error::NameTaken {
                    namespace,
                    name: name.clone(),
                    existing: holder.id,
                });
            }
        }
        let resources = resources_to_wire(request);
        let strategy = strategy_to_wire(&opts.resources.strategy);
        let id = ActorId::new(rt.worker, rt.next_seq());
        let mut actor = RemoteActor::new(id, class);
        actor.detached = opts.detached;
        if opts.max_restarts > 0 {
            actor.restarts = Some(Restarts {
                max_task_retries: opts.max_task_retries,
                used: 0.into(),
                max_restarts: opts.max_restarts,
            });
        }
        let empty = ObjectBuffer::copy_from_slice(&[]);
        let key = rt.objects.insert(
            rt,
            actor_key(id),
            Some(crate::ownership::Value::Inline(empty)),
            Vec::new(),
        );
        let (held, rx) = HeldActor::new(actor, Some(key));
        let actor = held.actor.clone();
        remember_actor(&mut self.actors.lock(), &held);
        if let Some(crate::placement::PlacementGroup {
            inner: crate::placement::PgInner::Cluster(pg, _),
        }) = &opts.resources.group
        {
            if let Ok(pg) = pg
                .clone()
                .into_any()
                .downcast::<crate::cluster::ClusterPg>()
            {
                pg.adopt_actor(&held);
            }
        }
        let max_concurrency = opts.max_concurrency as u32;
        let entry = ActorEntry {
            id,
            class_name: class.name.to_string(),
            name: opts.name.clone(),
            namespace,
            job: self.job,
            detached: opts.detached,
            status: ActorStatus::PendingCreation,
        };
        let launch = ActorLaunch {
            args,
            resources,
            strategy,
            labels: super::owner::WireLabels::of(&opts.resources.labels),
            max_concurrency,
            detached: opts.detached,
            creator: crate::context::current_trace(),
            max_restarts: opts.max_restarts,
            isolated: opts.isolated,
        };
        crate::context::before_child_submit();
        let me = self.clone();
        self.tokio
            .spawn(async move { me.run_actor(actor, rx, launch, entry).await });
        Ok(held)
    }

    pub(super) async fn run_actor(
        self: Arc<Self>,
        actor: Arc<RemoteActor>,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        mut launch: ActorLaunch,
        entry: ActorEntry,
    ) {
        let detached = launch.detached;
        // Whether the GCS has the actor's row (from its first registration
        // on): until then it cannot count a restart.
        let mut known = false;
        loop {
            let mut created = self.create_actor(&actor, &launch).await;
            if let Ok(link) = &created {
                // The GCS's actor table: `rayrs list actors`, and names. A
                // restarted actor registers its new home under its old row.
                let entry = ActorEntry {
                    status: ActorStatus::Alive { node: link.node },
                    ..entry.clone()
                };
                let registered = self
                    .gcs
                    .register_actor(
                        entry,
                        link.worker,
                        link.addr.to_string(),
                        launch.max_restarts,
                    )
                    .await;
                if registered.is_ok() {
                    known = true;
                }
                if let Err(e) = registered {
                    let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                    created = Err(Error::ActorDied {
                        actor: actor.id,
                        class: actor.class.name,
                        cause: format!("the GCS refused to register it: {e}"),
                    });
                }
            }
            if actor.restarts.is_none() {
                // Never re-created: its arguments need not be kept.
                launch.args.clear();
            }
            let lost = match created {
                Ok(link) => {
                    // A detached actor is not killed when this process's
                    // handles go.
                    match self.forward_calls(&actor, &mut rx, &link, !detached).await {
                        Some(lost) => lost,
                        None => {
                            let escaped = actor.escaped.load(std::sync::atomic::Ordering::Acquire);
                            let dead = actor.dead.lock().is_some();
                            if !(detached || escaped) || dead {
                                return;
                            }
                            // Handles elsewhere (or none, detached) may
                            // still use it: keep supervising it.
                            match self.supervise(&actor, &link).await {
                                Some(lost) => lost,
                                None => return,
                            }
                        }
                    }
                }
                // Its worker or node died while it was being created.
                Err(e @ (Error::WorkerDied { .. } | Error::NodeDied { .. })) => e,
                Err(e) => {
                    self.fail_calls(&actor, rx, death_cause(e)).await;
                    return;
                }
            };
            let killed = actor.dead.lock().is_some();
            let restart = match &actor.restarts {
                // Its first creation failed with its worker or node: the
                // GCS has no row to count on yet, so the count is kept here
                // (the registration that follows carries the actor).
                Some(r) if !killed && r.left() && !known => {
                    r.used.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    true
                }
                Some(r) if !killed && r.left() => {
                    let life = r.used.load(std::sync::atomic::Ordering::Acquire);
                    match self
                        .gcs
                        .actor_failed(actor.id, life, lost.to_string())
                        .await
                    {
                        Ok(ActorStatus::Restarting { attempt }) => {
                            // Never below a count kept here before the GCS knew it.
                            r.used
                                .fetch_max(attempt, std::sync::atomic::Ordering::AcqRel);
                            true
                        }
                        _ => false,
                    }
                }
                _ => false,
            };
            if !restart {
                let cause = match (&actor.restarts, killed) {
                    (_, true) => actor.dead.lock().clone().unwrap_or_default(),
                    (Some(r), false) => format!(
                        "its restarts are used up ({}); last: {lost}",
                        r.used.load(std::sync::atomic::Ordering::Acquire)
                    ),
                    (None, false) => lost.to_string(),
                };
                if let Some(rt) = self.rt() {
                    for c in std::mem::take(&mut *actor.resend.lock()) {
                        rt.complete_object(c.task.return_object(), Err(actor.died(&cause)));
                    }
                }
                self.fail_calls(&actor, rx, cause).await;
                return;
            }
            tracing::warn!(target: "ray::cluster", actor = %actor.id, class = actor.class.name, cause = %lost, "actor.restarting");
        }
    }

    /// Forwards `actor`'s calls, in order, to its worker on `link`: first
    /// the calls lost with an earlier life, then new ones. Returns `None`
    /// once every handle is gone (an `owned` actor is then killed; a
    /// handle found by name is not the owner's and leaves it alive), or
    /// why the link was lost.
    pub(super) async fn forward_calls(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        rx: &mut mpsc::UnboundedReceiver<ActorMsg>,
        link: &Arc<Link>,
        owned: bool,
    ) -> Option<Error> {
        let mut resend = std::mem::take(&mut *actor.resend.lock());
        resend.sort_by_key(|c| c.task);
        for c in resend {
            self.send_call(actor, link, c).await;
        }
        // One waiter on the link's loss for the whole forwarding, not one
        // per call (registering a waiter takes the `Notify`'s lock).
        let lost = link.lost();
        tokio::pin!(lost);
        // Likewise one waiter for a kill from outside the handles.
        let kill = actor.kill_now.notified();
        tokio::pin!(kill);
        loop {
            let msg = tokio::select! {
                biased;
                lost = &mut lost => return Some(lost),
                () = &mut kill => {
                    kill.set(actor.kill_now.notified());
                    Some(ActorMsg::Kill)
                }
                msg = rx.recv() => msg,
            };
            let Some(msg) = msg else { break };
            match msg {
                ActorMsg::Call {
                    task,
                    method,
                    args,
                    parent,
                } => {
                    let call = Resend {
                        task,
                        method,
                        args,
                        parent,
                        attempt: 0,
                    };
                    self.send_call(actor, link, call).await;
                }
                ActorMsg::Kill => {
                    let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                    actor.set_dead("killed by its owner".into());
                }
            }
        }
        if owned && !actor.escaped.load(std::sync::atomic::Ordering::Acquire) {
            // Every handle is gone: the actor goes too, once the calls
            // already sent are answered (their results may still be
            // awaited; embedded, queued calls run too).
            // (A worker lost meanwhile: the actor restarts within its
            // budget so the lost calls are sent again, and comes back here.)
            if !self.answered(actor.id, link).await {
                return Some(link.lost().await);
            }
            let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
        }
        None
    }

    /// Whether calls of `actor` are pushed and not answered.
    fn calls_in_flight(&self, actor: ActorId) -> bool {
        let st = self.owner.lock();
        st.taking.contains_key(&actor)
            || st.inflight.values().any(|f| {
                matches!(f.kind, super::owner::InflightKind::ActorCall { actor: a, .. } if a == actor)
            })
    }

    /// Watches an actor no handle here uses any more but which must live
    /// on (detached, or a handle escaped into a value): returns its
    /// worker's loss (to restart it), or `None` when it is killed.
    async fn supervise(&self, actor: &RemoteActor, link: &Link) -> Option<Error> {
        if !actor.key_is_gone.load(std::sync::atomic::Ordering::Acquire) {
            tokio::select! {
                lost = link.lost() => return Some(lost),
                () = actor.kill_now.notified() => {
                    let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                    return None;
                }
                () = actor.key_gone.notified() => {}
            }
        }
        // No handle is left anywhere. As for an actor whose handles never
        // left: calls already sent are answered first (a worker lost
        // meanwhile restarts it, within its budget, for the calls to be
        // sent again; this comes back here after).
        if !self.answered(actor.id, link).await {
            return Some(link.lost().await);
        }
        actor.set_dead("every handle to it is gone".into());
        let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
        None
    }

    /// Waits until no call of `actor` sent from here is unanswered;
    /// `false` if `link` is lost first.
    async fn answered(&self, actor: ActorId, link: &Link) -> bool {
        let lost = link.lost();
        tokio::pin!(lost);
        while self.calls_in_flight(actor) {
            tokio::select! {
                _ = &mut lost => return false,
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
        true
    }

    /// Sends one call to the actor's worker on `link` (or fails it: the
    /// actor is dead, its arguments cannot be had).
    async fn send_call(self: &Arc<Self>, actor: &Arc<RemoteActor>, link: &Arc<Link>, call: Resend) {
        let Resend {
            task,
            method,
            args,
            parent,
            attempt,
        } = call;
        let dead = actor.dead.lock().clone();
        if let Some(cause) = dead {
            if let Some(rt) = self.rt() {
                rt.complete_object(task.return_object(), Err(actor.died(&cause)));
            }
            return;
        }
        let wire = match self.wire_args(&args).await {
            Ok(w) => w,
            Err(e) => {
                if let Some(rt) = self.rt() {
                    rt.complete_object(task.return_object(), Err(e));
                }
                return;
            }
        };
        let f = Inflight {
            kind: InflightKind::ActorCall {
                class: actor.class.name,
                actor: actor.id,
                method,
                parent,
                attempt,
            },
            name: method.name,
            link: link.addr,
            node: link.node,
            args,
        };
        let item = WorkItem::ActorCall {
            task,
            actor: actor.id,
            method: method.id,
            args: wire,
            parent,
        };
        if !self.push(link, task, f, item) && actor.restarts.is_none() {
            actor.set_dead(format!(
                "its node {} (worker at {}) is gone",
                link.node, link.addr
            ));
        }
    }

    /// The key of actor `id` left this process's table. Its owner kills
    /// it if a handle escaped (see [`RemoteActor::key_freed`]).
    pub(super) fn actor_key_freed(&self, id: ActorId) {
        if self.rt().is_none_or(|rt| rt.worker != id.owner) {
            return;
        }
        let state = self.actors.lock().get(&id).and_then(|k| k.state.upgrade());
        if let Some(actor) = state {
            actor.key_freed();
        }
    }

    /// A handle to actor `id` of `class` (decoded from a value): this
    /// process's own handle if it has one, else one that finds the actor
    /// in the GCS (retrying while it is being created) and then forwards
    /// calls; calls made meanwhile wait in order.
    pub(crate) fn adopt_actor(
        self: &Arc<Self>,
        id: ActorId,
        class: &'static ActorClass,
    ) -> Arc<HeldActor> {
        // The key arrived with the value holding the handle.
        let key = self.rt().and_then(|rt| rt.objects.handle(actor_key(id)));
        let live = self
            .actors
            .lock()
            .get(&id)
            .and_then(|k| k.handles.upgrade());
        if let Some(a) = live {
            // (Handles found by name carry no key: one that came with its
            // key replaces them for later decodes.) `key` drops here,
            // outside the map's lock: a drop can free it.
            if a.key.is_some() || key.is_none() {
                return a;
            }
        }
        let mut actors = self.actors.lock();
        // The owner's own actor, back in a value after its handles went:
        // the same state, which its forwarder supervises.
        let state = actors.get(&id).and_then(|k| k.state.upgrade());
        let (held, rx) = match state {
            Some(state) => HeldActor::with_state(state, key.clone()),
            None => HeldActor::new(RemoteActor::new(id, class), key.clone()),
        };
        remember_actor(&mut actors, &held);
        drop(actors);
        let me = self.clone();
        let shared = held.actor.clone();
        self.tokio
            .spawn(async move { me.follow(shared, rx, None, key).await });
        held
    }

    /// Forwards a borrowed handle's calls to wherever the actor lives,
    /// finding it through the GCS (`lost`: a link it was lost on, which
    /// the GCS may still name until the owner reports the death). When
    /// the link is lost it finds the actor again, so calls made after a
    /// restart reach the next life; calls in flight at the loss fail.
    /// Ends when every handle is gone or the actor is dead for good.
    pub(super) async fn follow(
        self: Arc<Self>,
        actor: Arc<RemoteActor>,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        mut lost: Option<SocketAddr>,
        key: Option<Arc<RefHandle>>,
    ) {
        loop {
            let link = match self.locate(actor.id, actor.class, lost).await {
                Ok(link) => link,
                Err(e) => {
                    self.fail_calls(&actor, rx, death_cause(e)).await;
                    return;
                }
            };
            match self.forward_calls(&actor, &mut rx, &link, false).await {
                None => {
                    // The handles here are gone; the actor's key is held
                    // until the calls they made are answered, so its owner
                    // does not kill it under them.
                    if key.is_some() {
                        self.answered(actor.id, &link).await;
                    }
                    return;
                }
                Some(_) => lost = Some(link.addr),
            }
        }
    }

    /// The link to the worker hosting actor `id`, found through the GCS;
    /// waits (up to 30 s) while it is being created or restarted, or while
    /// the GCS still names `avoid`, where it was just lost.
    pub(super) async fn locate(
        self: &Arc<Self>,
        id: ActorId,
        class: &'static ActorClass,
        avoid: Option<SocketAddr>,
    ) -> Result<Arc<Link>, Error> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let loc = loop {
            match self.gcs.locate_actor(id).await {
                Ok(loc) if avoid.is_none() || loc.address.parse().ok() != avoid => break loc,
                Ok(loc) => {
                    if Instant::now() > deadline {
                        return Err(Error::ActorDied {
                            actor: id,
                            class: class.name,
                            cause: format!("its worker at {} was lost", loc.address),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(crate::cluster::ClusterError::Refused { reason }) => {
                    if let Some((_, cause)) = reason.split_once(ray_gcs::service::DEAD_MARK) {
                        return Err(Error::ActorDied {
                            actor: id,
                            class: class.name,
                            cause: cause.to_string(),
                        });
                    }
                    if Instant::now() > deadline {
                        return Err(Error::ActorDied {
                            actor: id,
                            class: class.name,
                            cause: reason,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(Error::cluster_source(e)),
            }
        };
        if loc.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: id.to_string(),
                expected: class.name,
                actual: intern(&loc.class_name),
            });
        }
        let node = self
            .actor_node(loc.id)
            .await
            .ok_or_else(|| Error::ActorDied {
                actor: id,
                class: class.name,
                cause: format!("its worker {} is no longer alive", loc.worker),
            })?;
        self.link(parse_addr(&loc.address)?, node, loc.worker).await
    }

    /// The node a live actor runs on, from the GCS's actor table.
    pub(super) async fn actor_node(&self, actor: ActorId) -> Option<NodeId> {
        self.gcs
            .actors()
            .await
            .ok()?
            .into_iter()
            .find(|a| a.id == actor)
            .and_then(|a| match a.status {
                ActorStatus::Alive { node } => Some(node),
                _ => None,
            })
    }

    /// Fails every call to `actor` until all its handles are gone.
    pub(super) async fn fail_calls(
        &self,
        actor: &RemoteActor,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        cause: String,
    ) {
        actor.set_dead(cause.clone());
        let rt = self.rt();
        while let Some(msg) = rx.recv().await {
            if let (ActorMsg::Call { task, .. }, Some(rt)) = (msg, &rt) {
                rt.complete_object(task.return_object(), Err(actor.died(&cause)));
            }
        }
    }

    /// A handle to the live actor named `name` in `namespace`, found in
    /// the GCS; calls go straight to the worker hosting it.
    pub(crate) async fn find_actor(
        self: &Arc<Self>,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<HeldActor>, Error> {
        let loc = self
            .gcs
            .lookup_actor(namespace, name)
            .await
            .map_err(|e| match e {
                crate::cluster::ClusterError::Refused { .. } => Error::ActorNotFound {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
                e => Error::cluster_source(e),
            })?;
        if loc.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: name.to_string(),
                expected: class.name,
                actual: intern(&loc.class_name),
            });
        }
        let addr = parse_addr(&loc.address)?;
        let node = self
            .actor_node(loc.id)
            .await
            .ok_or_else(|| Error::ActorDied {
                actor: loc.id,
                class: class.name,
                cause: format!("its worker {} is no longer alive", loc.worker),
            })?;
        let link = self.link(addr, node, loc.worker).await?;
        let (held, rx) = HeldActor::new(RemoteActor::new(loc.id, class), None);
        let me = self.clone();
        let shared = held.actor.clone();
        self.tokio.spawn(async move {
            let mut rx = rx;
            if me
                .forward_calls(&shared, &mut rx, &link, false)
                .await
                .is_some()
            {
                me.follow(shared, rx, Some(link.addr), None).await;
            }
        });
        Ok(held)
    }

    pub(super) async fn create_actor(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        launch: &ActorLaunch,
    ) -> Result<Arc<Link>, Error> {
        let ActorLaunch {
            args,
            resources,
            strategy,
            labels,
            max_concurrency,
            detached,
            creator,
            isolated,
            ..
        } = launch;
        self.rt().ok_or(Error::ShutDown)?;
        for d in crate::task::pending_deps(args) {
            let _ = d.buffer().await;
        }
        let wire = self.wire_args(args).await?;
        let (lease, node, link) = self
            .lease(resources, strategy, labels, Vec::new(), *isolated)
            .await?;
        let (done_tx, done_rx) = oneshot::channel();
        let task = TaskId::new(actor.id.owner, actor.id.seq);
        // The launch keeps the arguments alive.
        let f = Inflight {
            kind: InflightKind::ActorCreate(done_tx),
            name: actor.class.name,
            link: link.addr,
            node,
            args: Vec::new(),
        };
        let item = WorkItem::CreateActor {
            actor: actor.id,
            class: actor.class.id,
            args: wire,
            lease,
            resources: resources.clone(),
            max_concurrency: *max_concurrency,
            detached: *detached,
            creator: *creator,
        };
        self.push(&link, task, f, item);
        match done_rx.await {
            Ok(Ok(())) => Ok(link),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::ShutDown),
        }
    }

    // ---------------------------------------------------------------
    // Serving peers (owners pushing work, borrowers fetching objects)
    // ---------------------------------------------------------------
}
