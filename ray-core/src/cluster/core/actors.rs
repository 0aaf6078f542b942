//! Actors on a cluster, the shell of the sans-IO
//! [`ActorOwner`](crate::cluster::actor_owner): creating an actor on a
//! leased worker (or finding one through the GCS), the [`RemoteActor`]
//! handle state whose driver task carries out what the machine decides,
//! adopting a handle that arrived inside a value, and finding named actors.
//!
//! The machine decides when to create, push, restart, fail and kill; this
//! file only moves bytes: one driver task per actor and process feeds it
//! the calls its handles make and the losses of its links, and acts on
//! what it asks for. Answers and lost calls reach it from the push
//! machinery (`push.rs`) through [`RemoteActor::answered`] and
//! [`RemoteActor::call_lost`].

use super::*;
use crate::cluster::actor_owner::{Action, ActorOwner, CallError, Failed, Role};

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

/// How the driver gets each life of its actor.
pub(super) enum Lives {
    /// The owner creates them (and registers them with the GCS).
    Create(Box<(ActorLaunch, ActorEntry)>),
    /// A borrower finds them through the GCS; `first`: the link to the
    /// first life, already found.
    Find { first: Option<Arc<Link>> },
}

/// A call made through a handle, on its way to the driver.
pub(crate) struct ActorMsg {
    task: TaskId,
    call: Call,
}

/// What the machine carries for one call: what pushing it (again) needs.
pub(super) struct Call {
    pub(super) method: &'static ActorMethod,
    pub(super) args: Vec<TaskArg>,
    /// The calling task (`None`: the driver), for insight.
    pub(super) parent: Option<TaskId>,
    /// The caller's span the call was made in, or 0, for insight.
    pub(super) parent_span: u64,
}

/// The machine and what comes back to it with a handle.
pub(super) struct ActorState {
    pub(super) machine: ActorOwner<Call>,
    /// Channels of handles made after the others went (a handle came back
    /// in a value), for the driver to take over, in order.
    rx_back: VecDeque<mpsc::UnboundedReceiver<ActorMsg>>,
}

/// One actor as this process sees it: its machine, and the notice that
/// wakes its driver.
pub(crate) struct RemoteActor {
    pub(crate) id: ActorId,
    pub(crate) class: &'static ActorClass,
    pub(super) state: Mutex<ActorState>,
    /// The machine is dead (a call fails at once, without the lock the
    /// driver takes).
    dead: std::sync::atomic::AtomicBool,
    /// The runtime its calls' return objects live in.
    rt: Weak<Runtime>,
    /// The machine has actions from an event the driver did not feed it
    /// (an answer, a lost call, a kill, the key's free, a handle back).
    pub(super) wake: tokio::sync::Notify,
}

/// What this process's handles to an actor hold: its state, and the
/// sender to the driver. The driver holds the state but no sender, so
/// when the last handle goes its channel closes and the machine hears
/// that every handle here is gone.
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
    /// A handle to `actor` (holding `key`) and the driver's end of its
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
        parent_span: u64,
    ) {
        if self.actor.dead.load(std::sync::atomic::Ordering::Acquire) {
            let cause = self.actor.state.lock().machine.dead().map(str::to_string);
            let cause = cause.unwrap_or_default();
            rt.complete_object(task.return_object(), Err(self.actor.died(&cause)));
            return;
        }
        let msg = ActorMsg {
            task,
            call: Call {
                method,
                args,
                parent,
                parent_span,
            },
        };
        if let Err(mpsc::error::SendError(msg)) = self.tx.send(msg) {
            // The driver ended (its runtime is shutting down).
            let cause = self.actor.state.lock().machine.dead().map(str::to_string);
            let cause = cause.unwrap_or_else(|| "its owner stopped".into());
            rt.complete_object(msg.task.return_object(), Err(self.actor.died(&cause)));
        }
    }

    /// Kills the actor: calls made from now on fail with `ActorDied`
    /// ("killed through a handle"), as embedded.
    pub(crate) fn kill(&self) {
        self.actor.request_kill();
    }
}

impl RemoteActor {
    pub(super) fn new(
        id: ActorId,
        class: &'static ActorClass,
        role: Role,
        rt: Weak<Runtime>,
    ) -> Self {
        Self {
            id,
            class,
            rt,
            dead: false.into(),
            state: Mutex::new(ActorState {
                machine: ActorOwner::new(role),
                rx_back: VecDeque::new(),
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Feeds the machine an event from outside the driver: calls it fails
    /// are completed here and now (not behind a creation the driver may be
    /// waiting on); the driver is woken for anything else.
    fn event<R>(&self, f: impl FnOnce(&mut ActorOwner<Call>) -> R) -> R {
        self.feed(f, None)
    }

    /// Feeds the machine (`f`) and notes whether it is dead. With
    /// `actions` (the driver's own queue) every action goes there; without,
    /// failed calls are completed here and the driver is woken for the
    /// rest.
    fn feed<R>(
        &self,
        f: impl FnOnce(&mut ActorOwner<Call>) -> R,
        actions: Option<&mut VecDeque<Action<Call>>>,
    ) -> R {
        let mut failed = Vec::new();
        let mut st = self.state.lock();
        let out = f(&mut st.machine);
        if st.machine.dead().is_some() {
            self.dead.store(true, std::sync::atomic::Ordering::Release);
        }
        let wake = match actions {
            Some(actions) => {
                st.machine.take_actions(actions);
                false
            }
            None => {
                st.machine.take_failed(&mut failed);
                st.machine.has_actions()
            }
        };
        drop(st);
        if wake {
            self.wake.notify_one();
        }
        self.complete_failed(failed);
        out
    }

    /// Completes calls the machine failed (their argument refs go after
    /// the error is visible, outside every lock).
    fn complete_failed(&self, failed: Vec<Failed<Call>>) {
        if failed.is_empty() {
            return;
        }
        let rt = self.rt.upgrade();
        for f in failed {
            if let Some(rt) = &rt {
                rt.complete_object(f.task.return_object(), Err(self.call_error(f.error)));
            }
            drop(f.payload);
        }
    }

    /// Call `task`, pushed to this actor, was answered (its value is
    /// here, or it failed where it ran).
    pub(super) fn answered(&self, task: TaskId) {
        self.event(|m| m.answered(task));
    }

    /// Calls `tasks`, pushed to this actor, were answered (one batch of
    /// results, under one lock).
    pub(super) fn answered_all(&self, tasks: &[TaskId]) {
        self.event(|m| {
            for t in tasks {
                m.answered(*t);
            }
        });
    }

    /// A call pushed to this actor was lost with its worker (`err`): the
    /// machine sends it to the actor's next life, or fails it.
    pub(super) fn call_lost(&self, task: TaskId, f: Inflight, err: &Error) {
        let InflightKind::ActorCall {
            method,
            parent,
            parent_span,
            ..
        } = f.kind
        else {
            return;
        };
        let call = Call {
            method,
            args: f.args,
            parent,
            parent_span,
        };
        let unknown = self.event(|m| m.call_lost(task, call, err.to_string()));
        drop(unknown);
    }

    /// Marks the actor as reachable from elsewhere: it then lives until
    /// its key (see [`actor_key`]) is freed, i.e. until every handle
    /// anywhere is gone, not only this process's.
    pub(crate) fn escape(&self) {
        self.state.lock().machine.escape();
    }

    /// Its key object was freed here, its owner: no handle is left
    /// anywhere.
    pub(super) fn key_freed(&self) {
        self.event(ActorOwner::key_freed);
    }

    pub(super) fn died(&self, cause: &str) -> Error {
        Error::ActorDied {
            actor: self.id,
            class: self.class.name,
            cause: cause.to_string(),
        }
    }

    fn call_error(&self, e: CallError) -> Error {
        match e {
            CallError::Died(cause) => self.died(&cause),
            CallError::Unavailable(cause) => Error::ActorUnavailable {
                actor: self.id,
                class: self.class.name,
                cause,
            },
        }
    }

    /// Kills the actor through a handle.
    pub(crate) fn request_kill(&self) {
        self.event(ActorOwner::kill);
    }

    /// Kills the actor for `cause` (its placement group was removed).
    pub(crate) fn kill_because(&self, cause: String) {
        self.event(|m| m.kill_because(cause));
    }

    /// The actor is dead for `cause` before its creation was asked for
    /// (see `ActorOwner::abandon`).
    pub(super) fn abandon(&self, cause: String) {
        self.event(|m| m.abandon(cause));
    }
}

/// The row of the actor, not dead, that holds `name` in `namespace` (the
/// GCS lets one at a time hold it), from the actor table `actors`.
fn name_holder(actors: Vec<ActorEntry>, namespace: &str, name: &str) -> Option<ActorEntry> {
    actors.into_iter().find(|a| {
        a.name.as_deref() == Some(name)
            && a.namespace == namespace
            && !matches!(a.status, ActorStatus::Dead { .. })
    })
}

/// Calls the driver takes from its channel under one lock.
const CALL_BATCH: usize = 16;

type LostFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Error> + Send>>;

/// A loss that never comes: no life's link to watch.
fn never_lost() -> LostFuture {
    Box::pin(std::future::pending())
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
/// driver keeps while the machine runs (calls lost with a life are sent
/// to the next one even after the handles are gone).
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
        // Into a placement group: its bundle checked here, as embedded.
        let group_gone = match (&opts.resources.group, &opts.resources.strategy) {
            (Some(group), SchedulingStrategy::PlacementGroup { bundle, .. }) => {
                group.check_cluster_work(*bundle, request)?
            }
            _ => None,
        };
        let namespace = opts
            .namespace
            .clone()
            .unwrap_or_else(|| rt.settings.namespace.clone());
        let id = ActorId::new(rt.worker, rt.next_seq());
        if let Some(name) = &opts.name {
            self.reserve_name(id, class, name, &namespace, opts)?;
        }
        let resources = resources_to_wire(request);
        let strategy = strategy_to_wire(&opts.resources.strategy);
        let role = Role::Owner {
            max_restarts: opts.max_restarts,
            max_task_retries: opts.max_task_retries,
            detached: opts.detached,
        };
        let actor = RemoteActor::new(id, class, role, Arc::downgrade(rt));
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
        match group_gone {
            // Its group is gone already: it dies with it, as embedded, and
            // is never created (its driver task has not started yet).
            Some(Error::PlacementGroupRemoved { group, cause }) => held
                .actor
                .abandon(format!("its placement group {group} is gone: {cause}")),
            // Its group could not be placed: it never will be created.
            Some(e) => held
                .actor
                .abandon(format!("its placement group could not be placed: {e}")),
            None => {}
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
        crate::context::before_child_submit(0);
        let me = self.clone();
        let lives = Lives::Create(Box::new((launch, entry)));
        self.tokio
            .spawn(async move { me.drive_actor(actor, rx, lives, None).await });
        Ok(held)
    }

    /// Drives `actor`'s machine until it ends: feeds it the calls its
    /// handles make (on `rx`) and the loss of the current life's link, and
    /// carries out what it asks for. `key`: a borrower's hold on the
    /// actor's key, let go only when the machine ends (its calls
    /// answered), so the owner does not kill the actor under them.
    pub(super) async fn drive_actor(
        self: Arc<Self>,
        actor: Arc<RemoteActor>,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        mut lives: Lives,
        key: Option<Arc<RefHandle>>,
    ) {
        let mut link: Option<Arc<Link>> = None;
        let mut life = 0;
        let mut rx_open = true;
        // Its death is this process's to report to the GCS: it owns the
        // actor, or killed it through a handle (a borrower that merely
        // cannot find it says nothing).
        let owner = matches!(lives, Lives::Create(_));
        let mut killed_here = false;
        let mut reported = false;
        let mut actions = VecDeque::new();
        let mut lost = never_lost();
        // One waiter on the wake-up notice for the whole drive, renewed
        // when it fires (registering one takes the `Notify`'s lock).
        let wake = actor.wake.notified();
        tokio::pin!(wake);
        // Whether the machine may hold actions fed from outside (at the
        // start, and after a wake-up); what the driver feeds it itself
        // lands in `actions` directly, so a call costs one lock here.
        let mut check = true;
        loop {
            if check {
                check = false;
                let mut st = actor.state.lock();
                if !rx_open {
                    if let Some(back) = st.rx_back.pop_front() {
                        rx = back;
                        rx_open = true;
                    }
                }
                st.machine.take_actions(&mut actions);
            }
            while let Some(action) = actions.pop_front() {
                match action {
                    Action::Create { life: l } => {
                        life = l;
                        let avoid = link.take().map(|k| k.addr);
                        lost = never_lost();
                        if l > 0 {
                            tracing::warn!(target: "ray::cluster", actor = %actor.id, class = actor.class.name, life = l, "actor.restarting");
                        }
                        match self.life_of(&actor, &mut lives, avoid).await {
                            Ok(k) => {
                                let watched = k.clone();
                                lost = Box::pin(async move { watched.lost().await });
                                link = Some(k);
                                actor.feed(|m| m.created(l), Some(&mut actions));
                            }
                            Err((system, cause)) => actor
                                .feed(|m| m.create_failed(l, system, cause), Some(&mut actions)),
                        }
                    }
                    Action::Push {
                        task,
                        attempt,
                        payload,
                    } => match &link {
                        Some(k) => {
                            if attempt > 0 {
                                // The send before was lost with its life:
                                // the views end that run as failed (the
                                // resent run records its attempt).
                                tracing::debug!(target: "ray::cluster", actor = %actor.id, %task, attempt, "actor.call.resent");
                                crate::trace::lost(task, Some(attempt - 1), None);
                            }
                            self.send_call(&actor, k, task, payload, attempt).await
                        }
                        // (The machine pushes only to a life it was told
                        // is created.)
                        None => {
                            let cause = "no worker hosts it".to_string();
                            let unknown = actor
                                .feed(|m| m.call_lost(task, payload, cause), Some(&mut actions));
                            drop(unknown);
                        }
                    },
                    Action::Kill => {
                        killed_here = true;
                        if let Some(k) = &link {
                            let _ = k.tx.send(WorkItem::KillActor { actor: actor.id });
                        }
                    }
                    Action::AskRestart { used, cause } => {
                        let answer = self.gcs.actor_failed(actor.id, used, cause.clone()).await;
                        let restart = match answer {
                            Ok(ActorStatus::Restarting { attempt }) => Some(attempt),
                            _ => None,
                        };
                        actor.feed(|m| m.restart_answer(restart, cause), Some(&mut actions));
                    }
                    Action::Fail {
                        task,
                        error,
                        payload,
                    } => {
                        if let Some(rt) = self.rt() {
                            let e = actor.call_error(error);
                            crate::trace::lost(task, None, Some(&e));
                            rt.complete_object(task.return_object(), Err(e));
                        }
                        // Its argument refs go after the error is visible.
                        drop(payload);
                    }
                    Action::Ended => {
                        if owner || killed_here {
                            self.report_dead(&actor, &mut reported).await;
                        }
                        drop(key);
                        return;
                    }
                }
            }
            if owner || killed_here {
                self.report_dead(&actor, &mut reported).await;
            }
            tokio::select! {
                biased;
                err = &mut lost => {
                    lost = never_lost();
                    actor.feed(|m| m.lost(life, err.to_string()), Some(&mut actions));
                }
                () = &mut wake => {
                    wake.set(actor.wake.notified());
                    check = true;
                }
                msg = rx.recv(), if rx_open => match msg {
                    Some(first) => actor.feed(
                        |m| {
                            m.call(first.task, first.call);
                            // Calls queued meanwhile, under one lock; a
                            // few at a time, so the link's writer (on this
                            // runtime) sends while more are pushed
                            // (taking the whole backlog at once cost W3
                            // a quarter of its calls per second).
                            for _ in 1..CALL_BATCH {
                                let Ok(next) = rx.try_recv() else { break };
                                m.call(next.task, next.call);
                            }
                        },
                        Some(&mut actions),
                    ),
                    None => {
                        let mut st = actor.state.lock();
                        match st.rx_back.pop_front() {
                            Some(back) => rx = back,
                            None => {
                                rx_open = false;
                                st.machine.handles_gone();
                                st.machine.take_actions(&mut actions);
                                if st.machine.dead().is_some() {
                                    actor.dead.store(true, std::sync::atomic::Ordering::Release);
                                }
                            }
                        }
                    }
                },
            }
        }
    }

    /// Tells the GCS, once, that `actor` is dead for good if its machine
    /// says so (killed, let go, its creation failed, or its restarts spent):
    /// its row shows it dead and its name is free, as embedded. An actor
    /// the GCS never registered (created unnamed and failed) is nothing to
    /// it; the answer is not needed.
    async fn report_dead(&self, actor: &RemoteActor, reported: &mut bool) {
        // (The flag first: this runs on every turn of the drive loop.)
        if *reported || !actor.dead.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let cause = actor.state.lock().machine.dead().map(str::to_string);
        if let Some(cause) = cause {
            *reported = true;
            let _ = self.gcs.actor_dead(actor.id, cause).await;
        }
    }

    /// Holds `name` in `namespace` for actor `id` from its creation on, as
    /// embedded: the actor is registered pending in the GCS, so a second
    /// creator of the name fails with `NameTaken`, whether it comes after
    /// this one or races it. One GCS round trip, as Ray's creation of a
    /// named actor. A current-thread tokio runtime cannot wait for the GCS
    /// here: the name is then held only when the actor registers alive (a
    /// taken one makes its calls fail with `ActorDied`).
    fn reserve_name(
        &self,
        id: ActorId,
        class: &'static ActorClass,
        name: &str,
        namespace: &str,
        opts: &ActorOptions,
    ) -> crate::Result<()> {
        let gcs = self.gcs.clone();
        let entry = ActorEntry {
            id,
            class_name: class.name.to_string(),
            name: Some(name.to_string()),
            namespace: namespace.to_string(),
            job: self.job,
            detached: opts.detached,
            status: ActorStatus::PendingCreation,
        };
        let max_restarts = opts.max_restarts;
        let (ns, n) = (namespace.to_string(), name.to_string());
        let reserved = super::remote::block_on_cluster(&self.tokio, async move {
            match gcs
                .register_actor(entry, WorkerId(0), String::new(), max_restarts)
                .await
            {
                Ok(()) => Ok(()),
                Err(crate::cluster::ClusterError::Refused { reason }) => {
                    // Taken: by which actor (it may be pending itself).
                    let holder = gcs
                        .actors()
                        .await
                        .ok()
                        .and_then(|all| name_holder(all, &ns, &n))
                        .map(|a| a.id);
                    Err(match holder {
                        Some(existing) => Error::NameTaken {
                            namespace: ns,
                            name: n,
                            existing,
                        },
                        None => Error::ActorDied {
                            actor: id,
                            class: class.name,
                            cause: format!("the GCS refused to register it: {reason}"),
                        },
                    })
                }
                Err(e) => {
                    // The GCS may have registered it before the answer was
                    // lost: let the name go again (best effort).
                    let _ = gcs.actor_dead(id, "its creation failed".into()).await;
                    Err(Error::cluster_source(e))
                }
            }
        });
        match reserved {
            Ok(result) => result,
            // Not here (a current-thread runtime): at registration.
            Err(_) => Ok(()),
        }
    }

    /// The next life of `actor`: created (and registered with the GCS) by
    /// its owner, or found through the GCS by a borrower (`avoid`: the
    /// worker the last life was lost on). On failure, whether it was a
    /// system failure (the worker or node died) and the cause.
    async fn life_of(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        lives: &mut Lives,
        avoid: Option<SocketAddr>,
    ) -> Result<Arc<Link>, (bool, String)> {
        let (launch, entry) = match lives {
            Lives::Find { first } => {
                if let Some(link) = first.take() {
                    return Ok(link);
                }
                return self
                    .locate(actor.id, actor.class, avoid)
                    .await
                    .map_err(|e| (false, death_cause(e)));
            }
            Lives::Create(launch) => {
                let (launch, entry) = &mut **launch;
                (launch, entry)
            }
        };
        let created = self.create_actor(actor, launch).await;
        if launch.max_restarts == 0 {
            // Never created again: its arguments need not be kept.
            launch.args.clear();
        }
        let link = match created {
            Ok(link) => link,
            // Its worker or node died while it was being created.
            Err(e @ (Error::WorkerDied { .. } | Error::NodeDied { .. })) => {
                return Err((true, e.to_string()))
            }
            Err(e) => return Err((false, death_cause(e))),
        };
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
        match registered {
            Ok(_) => Ok(link),
            Err(e) => {
                let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                Err((false, format!("the GCS refused to register it: {e}")))
            }
        }
    }

    /// Sends call `task` to the actor's worker on `link` (or fails it: its
    /// arguments cannot be had).
    async fn send_call(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        link: &Arc<Link>,
        task: TaskId,
        call: Call,
        attempt: u32,
    ) {
        let wire = match self.wire_args(&call.args).await {
            Ok(w) => w,
            Err(e) => {
                if let Some(rt) = self.rt() {
                    rt.complete_object(task.return_object(), Err(e));
                }
                actor.answered(task);
                return;
            }
        };
        let f = Inflight {
            kind: InflightKind::ActorCall {
                class: actor.class.name,
                actor: actor.clone(),
                method: call.method,
                parent: call.parent,
                parent_span: call.parent_span,
            },
            name: call.method.name,
            link: link.addr,
            node: link.node,
            args: call.args,
        };
        let item = WorkItem::ActorCall {
            task,
            actor: actor.id,
            method: call.method.id,
            args: wire,
            parent: call.parent,
            parent_span: call.parent_span,
            attempt,
        };
        self.push(link, task, f, item);
    }

    /// The key of actor `id` left this process's table. Its owner kills
    /// it if a handle escaped and no handle is left here either.
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
    /// process's own handle if it has one; else a new handle on the
    /// actor's machine here if it still runs (the handles went, the
    /// machine did not); else a borrowed handle that finds the actor
    /// through the GCS (retrying while it is being created) and forwards
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
        if let Some(a) = &live {
            // (Handles found by name carry no key: one that came with its
            // key replaces them for later decodes.) `key` drops here,
            // outside the map's lock: a drop can free it.
            if a.key.is_some() || key.is_none() {
                return a.clone();
            }
        }
        let mut actors = self.actors.lock();
        let state = actors.get(&id).and_then(|k| k.state.upgrade());
        if let (None, Some(state)) = (&live, state) {
            // The actor's machine here still runs (its owner supervises
            // it, or its calls are being answered): its driver takes the
            // new handle's calls.
            let mut st = state.state.lock();
            if !st.machine.is_ended() {
                let (held, rx) = HeldActor::with_state(state.clone(), key.clone());
                st.rx_back.push_back(rx);
                st.machine.handles_back();
                drop(st);
                state.wake.notify_one();
                remember_actor(&mut actors, &held);
                return held;
            }
        }
        let rt = self.rt.get().cloned().unwrap_or_default();
        let actor = RemoteActor::new(id, class, Role::Borrower, rt);
        let (held, rx) = HeldActor::new(actor, key.clone());
        remember_actor(&mut actors, &held);
        drop(actors);
        let me = self.clone();
        let shared = held.actor.clone();
        let lives = Lives::Find { first: None };
        self.tokio
            .spawn(async move { me.drive_actor(shared, rx, lives, key).await });
        held
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

    /// A handle to the live actor named `name` in `namespace`, found in
    /// the GCS; calls go straight to the worker hosting it.
    pub(crate) async fn find_actor(
        self: &Arc<Self>,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<HeldActor>, Error> {
        let loc = match self.gcs.lookup_actor(namespace, name).await {
            Ok(loc) => loc,
            Err(crate::cluster::ClusterError::Refused { .. }) => {
                // Not alive, but perhaps being created (its name is held
                // from its creation) or restarted: a handle that finds it
                // once it lives, as embedded, where a lookup finds an actor
                // still pending.
                return self.find_pending(class, namespace, name).await;
            }
            Err(e) => return Err(Error::cluster_source(e)),
        };
        if loc.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: name.to_string(),
                expected: class.name,
                actual: intern(&loc.class_name),
            });
        }
        let addr = parse_addr(&loc.address)?;
        let Some(node) = self.actor_node(loc.id).await else {
            // It died (or its node did) between the two questions. Dead
            // for good, the name is free (or about to be), as for a lookup
            // a moment later; restarting, it still holds its name, and the
            // handle follows it to its next life. (Answering `ActorNotFound`
            // for a restarting actor was a race a test hit one run in a
            // few: a lookup right after a `kill -9`.)
            return self.find_pending(class, namespace, name).await;
        };
        let Ok(link) = self.link(addr, node, loc.worker).await else {
            // Its worker cannot be reached: it is dying, and perhaps
            // restarting; the GCS's table says which, as above.
            return self.find_pending(class, namespace, name).await;
        };
        Ok(self.found_by_name(loc.id, class, Some(link)))
    }

    /// A handle to actor `id` found by name: a borrower's, whose driver
    /// task follows the actor's lives (`first`: the live one's link, when
    /// it is known already).
    fn found_by_name(
        self: &Arc<Self>,
        id: ActorId,
        class: &'static ActorClass,
        first: Option<Arc<Link>>,
    ) -> Arc<HeldActor> {
        let rt = self.rt.get().cloned().unwrap_or_default();
        let actor = RemoteActor::new(id, class, Role::Borrower, rt);
        let (held, rx) = HeldActor::new(actor, None);
        let me = self.clone();
        let shared = held.actor.clone();
        let lives = Lives::Find { first };
        self.tokio
            .spawn(async move { me.drive_actor(shared, rx, lives, None).await });
        held
    }

    /// A handle to the actor named `name` that is registered pending (its
    /// creation under way) or restarting, which follows it once it lives;
    /// or `ActorNotFound`.
    async fn find_pending(
        self: &Arc<Self>,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<HeldActor>, Error> {
        let not_found = || Error::ActorNotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let actors = self.gcs.actors().await.map_err(Error::cluster_source)?;
        // (Alive by now, it is followed all the same.)
        let Some(entry) = name_holder(actors, namespace, name) else {
            return Err(not_found());
        };
        if entry.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: name.to_string(),
                expected: class.name,
                actual: intern(&entry.class_name),
            });
        }
        Ok(self.found_by_name(entry.id, class, None))
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
        let (lease, node, link) = match self
            .lease(resources, strategy, labels, Vec::new(), *isolated)
            .await
        {
            Ok(leased) => leased,
            // A node's refusal does not know what asked: the class does.
            Err(e) => {
                return Err(match e {
                    Error::Infeasible {
                        what,
                        reason,
                        request,
                        total,
                    } if what.is_empty() => Error::Infeasible {
                        what: actor.class.name.to_string(),
                        reason,
                        request,
                        total,
                    },
                    other => other,
                })
            }
        };
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
