//! Actors: a mailbox and a state, run on the CPU pool.
//!
//! An actor's calls queue in its mailbox in submission order. While calls
//! are waiting, up to `max_concurrency` drainer jobs run on the pool, each
//! popping and running calls. With the default of one drainer, calls run one
//! at a time in order. `&mut self` methods take the state's write lock and
//! so always run alone; `&self` methods share a read lock.

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use ray_gcs::{ActorInfo, ActorState as GcsActorState, GcsError};
use ray_proto::{ActorId, TaskId};
use ray_sched::ResourceSet;

use crate::context;
use crate::error::{Error, Result};
use crate::object_ref::{ObjectRef, TaskArg};
use crate::options::ActorOptions;
use crate::placement::Pool;
use crate::registry::{ActorClass, ActorMethod, ActorState, InvokeError, MethodInvoke};
use crate::runtime::{Dispatch, Runtime};
use crate::task::{invoke_guarded, panic_message, resolve_args};

/// Calls a drainer runs before it lets other work have its pool thread.
const DRAIN_BUDGET: usize = 64;

/// The cause of death of an actor killed through a handle (`kill`), in
/// both modes: whoever held the handle (its owner, or a process that found
/// it by name) killed it.
pub(crate) const KILLED: &str = "killed through a handle";

/// One call waiting in a mailbox.
struct ActorCall {
    task: TaskId,
    method: &'static ActorMethod,
    args: Vec<TaskArg>,
    /// The task that made the call (`None`: the driver).
    parent: Option<TaskId>,
    /// The application span it was made in (see
    /// [`crate::trace::user_span`]), or 0.
    parent_span: u64,
    /// The id insight records: `task`, or the owner's id for a call pushed
    /// by another process.
    trace: TaskId,
    /// The return object's cell (the caller's handle holds it too).
    ret: Arc<crate::ownership::ObjectCell>,
    /// Which send of the call this is (0: its first; see
    /// `WorkItem::ActorCall`).
    attempt: u32,
}

enum Status {
    /// The constructor has not run yet; calls queue.
    Pending,
    Alive,
    Dead(String),
}

struct Mailbox {
    queue: VecDeque<ActorCall>,
    drainers: usize,
    status: Status,
}

/// A live (or dying) actor.
pub(crate) struct ActorCell {
    pub(crate) id: ActorId,
    pub(crate) class: &'static ActorClass,
    rt: Arc<Runtime>,
    resources: ResourceSet,
    pool: Pool,
    holds_resources: AtomicBool,
    max_concurrency: usize,
    ctor_args: Mutex<Option<Vec<TaskArg>>>,
    mailbox: Mutex<Mailbox>,
    state: RwLock<Option<ActorState>>,
    /// The task that created it (`None`: the driver), for insight.
    creator: Option<TaskId>,
    /// Told once whether the constructor succeeded, or the actor's death
    /// ([`Error::ActorDied`]); a worker hosting the actor for a remote
    /// owner waits on it.
    created: Mutex<Option<tokio::sync::oneshot::Sender<Result<()>>>>,
}

impl ActorCell {
    /// Runs a call another process pushed to this worker's actor: under a
    /// local id (`task`), recorded by insight as the owner's `trace` id
    /// with the owner's `parent` and `attempt` (which send of the call this
    /// is); the owner already recorded the submit.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn call_pushed(
        self: &Arc<Self>,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        trace: TaskId,
        (parent, parent_span): (Option<TaskId>, u64),
        attempt: u32,
    ) -> Result<Arc<crate::ownership::RefHandle>> {
        let rt = &self.rt;
        rt.check_running()?;
        let task = rt.new_task_id();
        let handle = rt.pending_return(task)?;
        self.enqueue(ActorCall {
            task,
            method,
            args,
            parent,
            parent_span,
            trace,
            ret: handle.cell.clone(),
            attempt,
        });
        Ok(handle)
    }

    /// Runs the constructor; resources were acquired by admission.
    pub(crate) fn construct(self: &Arc<Self>, rt: &Arc<Runtime>) {
        self.holds_resources.store(true, Ordering::Release);
        if self.is_dead() {
            // Killed while it waited for resources: run nothing, give them back.
            self.give_back_resources();
            return;
        }
        let args = self.ctor_args.lock().take().unwrap_or_default();
        let task = TaskId::new(self.id.owner, self.id.seq);
        let mut span = crate::trace::actor_run(
            crate::trace::Run {
                task,
                parent: self.creator,
                parent_span: 0,
                node: rt.node,
                worker: rt.worker,
            },
            self.id.as_u128(),
            self.class.name,
            None,
        );
        let outcome = context::with_task(rt, task, task, Some(self.id), None, || {
            let args = resolve_args(&args)?;
            match catch_unwind(AssertUnwindSafe(|| (self.class.construct)(&args))) {
                Ok(Ok(state)) => Ok(state),
                Ok(Err(InvokeError::Failed(e))) => Err(e.to_string()),
                Ok(Err(InvokeError::User(e))) => Err(format!("constructor failed: {e}")),
                Err(p) => Err(format!(
                    "constructor panicked: {}",
                    panic_message(p.as_ref())
                )),
            }
            .map_err(|cause| Error::ActorDied {
                actor: self.id,
                class: self.class.name,
                cause,
            })
        });
        if let Err(e) = &outcome {
            span.failed(e);
        }
        match outcome {
            Ok(state) => {
                let spawn = {
                    let mut mb = self.mailbox.lock();
                    if !matches!(mb.status, Status::Pending) {
                        // Killed while constructing: the state is dropped
                        // below, outside the lock; `fail` gave the resources back.
                        drop(mb);
                        drop(state);
                        return;
                    }
                    *self.state.write() = Some(state);
                    mb.status = Status::Alive;
                    let n = mb.queue.len().min(self.max_concurrency);
                    mb.drainers += n;
                    n
                };
                let _ = rt
                    .gcs
                    .lock()
                    .set_actor_state(self.id, GcsActorState::Alive { node: rt.node });
                if let Some(tx) = self.created.lock().take() {
                    let _ = tx.send(Ok(()));
                }
                for _ in 0..spawn {
                    self.spawn_drainer();
                }
            }
            Err(Error::ActorDied { cause, .. }) => self.fail(cause),
            Err(e) => self.fail(e.to_string()),
        }
    }

    fn died(&self, cause: &str) -> Error {
        Error::ActorDied {
            actor: self.id,
            class: self.class.name,
            cause: cause.to_string(),
        }
    }

    /// Queues a call, starting a drainer if a slot is free.
    fn enqueue(self: &Arc<Self>, call: ActorCall) {
        let spawn = {
            let mut mb = self.mailbox.lock();
            if let Status::Dead(cause) = &mb.status {
                let err = self.died(cause);
                drop(mb);
                self.rt
                    .complete_object_in(call.task.return_object(), Some(&call.ret), Err(err));
                return;
            }
            mb.queue.push_back(call);
            let spawn = matches!(mb.status, Status::Alive) && mb.drainers < self.max_concurrency;
            if spawn {
                mb.drainers += 1;
            }
            spawn
        };
        if spawn {
            self.spawn_drainer();
        }
    }

    fn spawn_drainer(self: &Arc<Self>) {
        let cell = self.clone();
        if self
            .rt
            .pool
            .execute(Box::new(move || cell.drain()))
            .is_err()
        {
            self.mailbox.lock().drainers -= 1;
        }
    }

    /// Runs queued calls until the mailbox is empty or the budget is spent.
    fn drain(self: Arc<Self>) {
        for _ in 0..DRAIN_BUDGET {
            let call = {
                let mut mb = self.mailbox.lock();
                match mb.queue.pop_front() {
                    Some(call) => call,
                    None => {
                        mb.drainers -= 1;
                        return;
                    }
                }
            };
            self.run_call(call);
        }
        // Let other queued work run; this drainer goes to the back.
        self.spawn_drainer();
    }

    fn run_call(self: &Arc<Self>, call: ActorCall) {
        let rt = &self.rt;
        let mut span = crate::trace::actor_run(
            crate::trace::Run {
                task: call.trace,
                parent: call.parent,
                parent_span: call.parent_span,
                node: rt.node,
                worker: rt.worker,
            },
            self.id.as_u128(),
            self.class.name,
            Some((call.method.name, call.attempt)),
        );
        let outcome = context::with_task(rt, call.task, call.trace, Some(self.id), None, || {
            let args = resolve_args(&call.args)?;
            invoke_guarded(call.task, call.method.name, || match call.method.invoke {
                MethodInvoke::Shared(f) => {
                    let guard = self.state.read();
                    match guard.as_ref() {
                        Some(state) => f(state.as_ref(), &args),
                        None => Err(InvokeError::Failed(self.died("its state is gone"))),
                    }
                }
                MethodInvoke::Exclusive(f) => {
                    let mut guard = self.state.write();
                    match guard.as_mut() {
                        Some(state) => f(state.as_mut(), &args),
                        None => Err(InvokeError::Failed(self.died("its state is gone"))),
                    }
                }
            })
        });
        if let Err(e) = &outcome {
            span.failed(e);
        }
        if self.is_dead() {
            // Killed while this call ran: its state goes now.
            let state = self.state.try_write().and_then(|mut s| s.take());
            drop(state);
        }
        let ActorCall {
            task, args, ret, ..
        } = call;
        // Argument refs go before the result becomes visible (see run_task).
        drop(args);
        rt.complete_object_in(task.return_object(), Some(&ret), outcome);
    }

    fn is_dead(&self) -> bool {
        matches!(self.mailbox.lock().status, Status::Dead(_))
    }

    /// The actor dies: queued calls fail, its state drops, resources return.
    pub(crate) fn fail(&self, cause: String) {
        let queued = {
            let mut mb = self.mailbox.lock();
            if matches!(mb.status, Status::Dead(_)) {
                return;
            }
            mb.status = Status::Dead(cause.clone());
            std::mem::take(&mut mb.queue)
        };
        tracing::debug!(target: "ray::actor", actor_id = %self.id, cause = %cause, "actor.dead");
        if let Some(tx) = self.created.lock().take() {
            let _ = tx.send(Err(self.died(&cause)));
        }
        for call in queued {
            self.rt.complete_object_in(
                call.task.return_object(),
                Some(&call.ret),
                Err(self.died(&cause)),
            );
        }
        // A call may be running and holding the state (it may even be the
        // one killing its own actor): then that call drops the state when it
        // returns (see `run_call`), instead of this waiting for it.
        let state = self.state.try_write().and_then(|mut s| s.take());
        drop(state);
        self.give_back_resources();
        let _ = self
            .rt
            .gcs
            .lock()
            .set_actor_state(self.id, GcsActorState::Dead { cause });
        let pinned = self.rt.pinned_actors.lock().remove(&self.id);
        drop(pinned);
        let escaped = self.rt.escaped_actors.lock().remove(&self.id);
        drop(escaped);
    }

    fn give_back_resources(&self) {
        if self.holds_resources.swap(false, Ordering::AcqRel) {
            self.rt.release_to(&self.pool, &self.resources);
        }
    }
}

impl Drop for ActorCell {
    fn drop(&mut self) {
        // The last handle and the last queued call are gone.
        self.rt.live_actors.lock().remove(&self.id);
        self.give_back_resources();
        let cause = "all handles to it were dropped".to_string();
        let _ = self
            .rt
            .gcs
            .lock()
            .set_actor_state(self.id, GcsActorState::Dead { cause });
    }
}

/// Says once whether an actor's constructor succeeded (`Err`: why it died).
pub(crate) type Created = tokio::sync::oneshot::Receiver<Result<()>>;

/// Creates an actor; the constructor runs once resources allow.
pub(crate) fn spawn_actor(
    rt: &Arc<Runtime>,
    class: &'static ActorClass,
    args: Vec<TaskArg>,
    opts: ActorOptions,
) -> Result<Arc<ActorCell>> {
    let id = ActorId::new(rt.worker, rt.next_seq());
    context::before_child_submit(0);
    spawn_actor_as(rt, id, class, args, opts, context::current_trace()).map(|(cell, _)| cell)
}

/// [`spawn_actor`] under a given id (a remote owner chose it); also
/// returns the signal of the constructor's outcome.
pub(crate) fn spawn_actor_as(
    rt: &Arc<Runtime>,
    id: ActorId,
    class: &'static ActorClass,
    args: Vec<TaskArg>,
    opts: ActorOptions,
    creator: Option<TaskId>,
) -> Result<(Arc<ActorCell>, Created)> {
    rt.check_running()?;
    let req = opts.validate()?.clone();
    let pool = rt.check_placeable(class.name, &opts.resources)?;
    let (created_tx, created_rx) = tokio::sync::oneshot::channel();
    let namespace = opts
        .namespace
        .clone()
        .unwrap_or_else(|| rt.settings.namespace.clone());
    let info = ActorInfo {
        id,
        class_name: class.name.to_string(),
        name: opts.name.clone(),
        namespace,
        job: rt.job,
        detached: opts.detached,
        max_restarts: 0,
    };
    rt.gcs.lock().register_actor(info).map_err(|e| match e {
        GcsError::NameTaken {
            namespace,
            name,
            existing,
        } => Error::NameTaken {
            namespace,
            name,
            existing,
        },
        other => Error::InvalidArgument(other.to_string()),
    })?;
    let deps = crate::task::pending_deps(&args);
    let cell = Arc::new(ActorCell {
        id,
        class,
        rt: rt.clone(),
        resources: req.clone(),
        pool: pool.clone(),
        holds_resources: AtomicBool::new(false),
        max_concurrency: opts.max_concurrency,
        ctor_args: Mutex::new(Some(args)),
        mailbox: Mutex::new(Mailbox {
            queue: VecDeque::new(),
            drainers: 0,
            status: Status::Pending,
        }),
        state: RwLock::new(None),
        created: Mutex::new(Some(created_tx)),
        creator,
    });
    rt.live_actors.lock().insert(id, Arc::downgrade(&cell));
    if let Pool::Bundle(pg, _) = &pool {
        pg.adopt_actor(&cell);
    }
    // A named actor lives by its handles (those found by name count too),
    // as on a cluster and in Ray; only a detached one outlives them.
    if opts.detached {
        rt.pinned_actors.lock().insert(id, cell.clone());
    }
    rt.admit_when_ready(deps, pool, req, Dispatch::CreateActor(cell.clone()));
    Ok((cell, created_rx))
}

/// An actor class made by `#[remote]` on a struct and its `impl`.
pub trait RemoteActor: Send + Sync + Sized + 'static {
    /// The generated type holding the typed call methods.
    type Stub: From<RawActorHandle> + Clone + Send + Sync;
    /// The registered class.
    const CLASS: &'static ActorClass;
}

/// An untyped actor handle; generated stubs wrap it.
#[derive(Clone)]
pub struct RawActorHandle {
    pub(crate) target: Target,
}

/// Where an actor lives.
#[derive(Clone)]
pub(crate) enum Target {
    /// In this process.
    Local(Arc<ActorCell>),
    /// In another process of the cluster.
    Remote(Arc<dyn crate::remote::RemoteActorRef>, Arc<Runtime>),
}

impl RawActorHandle {
    /// Submits a call of `method` (generated code calls this).
    #[doc(hidden)]
    pub fn __call<R>(
        &self,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
    ) -> Result<ObjectRef<R>> {
        let rt = match &self.target {
            Target::Local(cell) => &cell.rt,
            Target::Remote(_, rt) => rt,
        };
        rt.check_running()?;
        let args = match &self.target {
            Target::Local(_) => args,
            Target::Remote(..) => rt.promote_large_args(args)?,
        };
        let task = rt.new_task_id();
        let handle = rt.pending_return(task)?;
        let parent = context::current_trace();
        let parent_span = crate::trace::user_span();
        context::before_child_submit(parent_span);
        crate::trace::submit(
            task,
            parent,
            parent_span,
            method.name,
            Some(self.id().as_u128()),
        );
        match &self.target {
            Target::Local(cell) => cell.enqueue(ActorCall {
                task,
                method,
                args,
                parent,
                parent_span,
                trace: task,
                ret: handle.cell.clone(),
                attempt: 0,
            }),
            Target::Remote(actor, rt) => actor.call(rt, task, method, args, parent, parent_span),
        }
        Ok(ObjectRef::from_handle(handle))
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        match &self.target {
            Target::Local(cell) => cell.id,
            Target::Remote(actor, _) => actor.id(),
        }
    }

    fn kill(&self) {
        match &self.target {
            Target::Local(cell) => cell.fail(KILLED.into()),
            Target::Remote(actor, _) => actor.kill(),
        }
    }
}

/// A typed handle to a live actor of class `A`.
///
/// Method calls go through `Deref` to the generated stub:
/// `handle.incr(5)?` returns an `ObjectRef` of the method's result.
pub struct ActorHandle<A: RemoteActor> {
    raw: RawActorHandle,
    stub: A::Stub,
    _a: PhantomData<fn() -> A>,
}

impl<A: RemoteActor> Clone for ActorHandle<A> {
    fn clone(&self) -> Self {
        Self {
            raw: self.raw.clone(),
            stub: self.stub.clone(),
            _a: PhantomData,
        }
    }
}

impl<A: RemoteActor> fmt::Debug for ActorHandle<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorHandle<{}>({})", A::CLASS.name, self.raw.id())
    }
}

impl<A: RemoteActor> ActorHandle<A> {
    pub(crate) fn from_raw(raw: RawActorHandle) -> Self {
        Self {
            stub: A::Stub::from(raw.clone()),
            raw,
            _a: PhantomData,
        }
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.raw.id()
    }

    /// Kills the actor: queued and future calls fail with `ActorDied`.
    /// A call already running finishes.
    pub fn kill(&self) {
        self.raw.kill();
    }

    /// Creates an actor (generated code calls this).
    #[doc(hidden)]
    pub fn __spawn(ray: &crate::Ray, args: Vec<TaskArg>, opts: ActorOptions) -> Result<Self> {
        if let Some(remote) = ray.rt.remote.get() {
            ray.rt.check_running()?;
            let args = ray.rt.promote_large_args(args)?;
            let actor = remote.spawn_actor(&ray.rt, A::CLASS, args, &opts)?;
            return Ok(Self::from_raw(RawActorHandle {
                target: Target::Remote(actor, ray.rt.clone()),
            }));
        }
        let cell = spawn_actor(&ray.rt, A::CLASS, args, opts)?;
        Ok(Self::from_raw(RawActorHandle {
            target: Target::Local(cell),
        }))
    }
}

impl<A: RemoteActor> Deref for ActorHandle<A> {
    type Target = A::Stub;

    fn deref(&self) -> &A::Stub {
        &self.stub
    }
}

/// Looks up a named actor of class `A`.
pub(crate) fn lookup<A: RemoteActor>(
    rt: &Arc<Runtime>,
    name: &str,
    namespace: &str,
) -> Result<ActorHandle<A>> {
    // The same error in both modes (a cluster's GCS link is gone too).
    rt.check_running()?;
    if let Some(remote) = rt.remote.get() {
        let actor = remote.find_actor(A::CLASS, namespace, name)?;
        return Ok(ActorHandle::from_raw(RawActorHandle {
            target: Target::Remote(actor, rt.clone()),
        }));
    }
    let not_found = || Error::ActorNotFound {
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let id = rt
        .gcs
        .lock()
        .named_actor(namespace, name)
        .ok_or_else(not_found)?;
    let cell = rt
        .live_actors
        .lock()
        .get(&id)
        .and_then(std::sync::Weak::upgrade)
        .ok_or_else(not_found)?;
    if cell.class.id != A::CLASS.id {
        return Err(Error::ActorClassMismatch {
            name: name.to_string(),
            expected: A::CLASS.name,
            actual: cell.class.name,
        });
    }
    Ok(ActorHandle::from_raw(RawActorHandle {
        target: Target::Local(cell),
    }))
}

// An `ActorHandle` inside a value (a task argument, a returned value, a
// put) travels as the actor's id; the receiving process finds the actor
// (its own handle, its local cell, or the GCS's location of a remote one).

impl<A: RemoteActor> rkyv::Archive for ActorHandle<A> {
    type Archived = ray_proto::ArchivedActorId;
    type Resolver = <ActorId as rkyv::Archive>::Resolver;

    fn resolve(&self, resolver: Self::Resolver, out: rkyv::Place<Self::Archived>) {
        self.id().resolve(resolver, out)
    }
}

/// Set in the sequence number of an actor's key object.
const ACTOR_KEY: u64 = 1 << 63;

/// The object standing for actor `id` while handles to it are inside
/// values: owned by the actor's owner, held by the values (and, on a
/// cluster, by every handle). The actor goes once no handle and no key is
/// left.
pub(crate) fn actor_key(id: ActorId) -> ray_proto::ObjectId {
    ray_proto::ObjectId::new(id.owner, id.seq | ACTOR_KEY)
}

/// The actor `id` stands for, if it is an actor's key.
pub(crate) fn actor_of_key(id: ray_proto::ObjectId) -> Option<ActorId> {
    (id.seq & ACTOR_KEY != 0).then(|| ActorId::new(id.owner, id.seq & !ACTOR_KEY))
}

/// The key of embedded actor `cell`, made at its first escape into a
/// value: the runtime keeps the actor while the key lives
/// ([`Runtime::escaped_actors`]).
fn escape_embedded(cell: &Arc<ActorCell>) -> Arc<crate::ownership::RefHandle> {
    let rt = &cell.rt;
    let mut escaped = rt.escaped_actors.lock();
    let live = escaped.get(&cell.id).and_then(|(key, _)| key.upgrade());
    if let Some(key) = live {
        return key;
    }
    let empty = ray_store::ObjectBuffer::copy_from_slice(&[]);
    let value = Some(crate::ownership::Value::Inline(empty));
    let key = rt.objects.insert(rt, actor_key(cell.id), value, Vec::new());
    let old = escaped.insert(cell.id, (Arc::downgrade(&key), cell.clone()));
    drop(escaped);
    // (A dead key's entry, dropped outside the lock.)
    drop(old);
    key
}

impl<A: RemoteActor, S: rkyv::rancor::Fallible + ?Sized> rkyv::Serialize<S> for ActorHandle<A> {
    fn serialize(&self, serializer: &mut S) -> std::result::Result<Self::Resolver, S::Error> {
        // The value may outlive every handle here: keep the actor alive.
        match &self.raw.target {
            // Embedded: the value holds the actor's key, which keeps the
            // actor until every value holding it is gone too.
            Target::Local(cell) if cell.rt.remote.get().is_none() => {
                let key = escape_embedded(cell);
                crate::object::note_nested(&key);
            }
            // A worker's own actor: its owner decides when it goes.
            Target::Local(cell) => {
                cell.rt.pinned_actors.lock().insert(cell.id, cell.clone());
            }
            Target::Remote(actor, _) => {
                if let Some(key) = actor.escape() {
                    crate::object::note_nested(&key);
                }
            }
        }
        self.id().serialize(serializer)
    }
}

impl<A, D> rkyv::Deserialize<ActorHandle<A>, D> for ray_proto::ArchivedActorId
where
    A: RemoteActor,
    D: rkyv::rancor::Fallible + ?Sized,
    D::Error: rkyv::rancor::Source,
{
    fn deserialize(&self, deserializer: &mut D) -> std::result::Result<ActorHandle<A>, D::Error> {
        use rkyv::rancor::Source;
        let id: ActorId = rkyv::Deserialize::<ActorId, D>::deserialize(self, deserializer)?;
        let Some(rt) = crate::object::decoding_runtime() else {
            return Err(D::Error::new(HandleError(
                id,
                "decoded outside a ray-rs runtime".into(),
            )));
        };
        from_id::<A>(&rt, id).map_err(|e| D::Error::new(HandleError(id, e.to_string())))
    }
}

/// The handle of actor `id` as this process can reach it.
fn from_id<A: RemoteActor>(rt: &Arc<Runtime>, id: ActorId) -> Result<ActorHandle<A>> {
    let local = rt
        .live_actors
        .lock()
        .get(&id)
        .and_then(std::sync::Weak::upgrade);
    if let Some(cell) = local {
        if cell.class.id != A::CLASS.id {
            return Err(Error::ActorClassMismatch {
                name: id.to_string(),
                expected: A::CLASS.name,
                actual: cell.class.name,
            });
        }
        return Ok(ActorHandle::from_raw(RawActorHandle {
            target: Target::Local(cell),
        }));
    }
    match rt.remote.get() {
        Some(remote) => Ok(ActorHandle::from_raw(RawActorHandle {
            target: Target::Remote(remote.adopt_actor(id, A::CLASS), rt.clone()),
        })),
        None => Err(Error::ActorDied {
            actor: id,
            class: A::CLASS.name,
            cause: "no longer alive in this runtime".into(),
        }),
    }
}

#[derive(Debug)]
struct HandleError(ActorId, String);

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "actor handle {}: {}", self.0, self.1)
    }
}

impl std::error::Error for HandleError {}
