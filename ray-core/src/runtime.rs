//! The node runtime behind a [`Ray`](crate::Ray) handle: ids, the owner's
//! object table, the object store, admission (ray-sched) and the CPU pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_gcs::Gcs;
use ray_proto::{ActorId, JobId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};
use ray_sched::{Admission, LocalQueue, ResourceSet, SchedulingStrategy};
use ray_store::{ObjectBuffer, ObjectStore};

use crate::actor::ActorCell;
use crate::error::{Error, Result};
use crate::object_ref::{ArgKind, TaskArg};
use crate::options::ResourceRequest;
use crate::ownership::{ObjectTable, RefHandle, Value};
use crate::placement::{PgCell, PgInner, Pool};
use crate::pool::CpuPool;
use crate::task::TaskSpec;

/// Inline value bytes one cluster message (a task's arguments, a result,
/// an error's payload) carries at most: larger values travel as objects
/// (an error's payload is dropped), so work frames stay well below the
/// transport's cap (64 MiB).
pub(crate) const MAX_INLINE_MESSAGE_BYTES: usize = 16 << 20;

/// Safety cap on user code running at once on one node (threads).
const MAX_RUNNING_JOBS: usize = 1024;

/// Work waiting for resources on this node.
pub(crate) enum Dispatch {
    Task(TaskSpec),
    CreateActor(Arc<ActorCell>),
    /// A placement group's reservation of the node.
    ReservePg(Arc<PgCell>),
}

/// Settings of an embedded runtime, fixed at `init`.
pub(crate) struct Settings {
    pub(crate) max_inline_bytes: usize,
    pub(crate) put_timeout: Duration,
    pub(crate) namespace: String,
    /// How long an idle pool thread spins for new work before sleeping.
    pub(crate) pool_spin: Duration,
    /// How long a driver's first poll of a pending object spins before it
    /// parks (when a core is idle); zero where results arrive over the
    /// network.
    pub(crate) get_spin: Duration,
    /// The labels of the embedded node ([`Config::labels`](crate::Config::labels)).
    pub(crate) node_labels: std::collections::BTreeMap<String, String>,
}

impl Settings {
    /// What `config` sets for a runtime, with the pool's and a get's spin
    /// (a cluster process spins neither: its work and results arrive over
    /// the network), and the object store it sizes.
    pub(crate) fn from_config(
        config: &crate::ray::Config,
        pool_spin: Duration,
        get_spin: Duration,
    ) -> (Self, ObjectStore) {
        let settings = Self {
            max_inline_bytes: config.max_inline_bytes,
            put_timeout: config.put_timeout,
            namespace: config.namespace.clone(),
            node_labels: config.labels.clone(),
            pool_spin,
            get_spin,
        };
        let store = ObjectStore::new(ray_store::StoreConfig {
            capacity_bytes: config.object_store_bytes,
        });
        (settings, store)
    }
}

/// Everything one worker (here: the embedded node) runs on.
pub(crate) struct Runtime {
    pub(crate) worker: WorkerId,
    pub(crate) node: NodeId,
    pub(crate) job: JobId,
    next_seq: AtomicU64,
    pub(crate) objects: ObjectTable,
    pub(crate) store: ObjectStore,
    pub(crate) sched: Mutex<LocalQueue<Dispatch>>,
    /// The node's total resources (fixed for its life), readable without
    /// taking `sched`: feasibility checks on the submit path need no lock.
    pub(crate) node_total: ResourceSet,
    pub(crate) pool: CpuPool,
    pub(crate) gcs: Mutex<Gcs>,
    /// Actors kept alive by the runtime itself (detached ones).
    pub(crate) pinned_actors: Mutex<HashMap<ActorId, Arc<ActorCell>>>,
    /// Embedded actors whose handles went into values: each with its key
    /// object (see `actor::actor_key`), kept until the key is freed.
    #[allow(clippy::type_complexity)]
    pub(crate) escaped_actors:
        Mutex<HashMap<ActorId, (Weak<crate::ownership::RefHandle>, Arc<ActorCell>)>>,
    /// Every actor not yet dropped, so shutdown can stop them all.
    pub(crate) live_actors: Mutex<HashMap<ActorId, Weak<ActorCell>>>,
    /// Placement groups not yet removed.
    pub(crate) pgs: Mutex<HashMap<PlacementGroupId, Arc<PgCell>>>,
    pub(crate) tokio: tokio::runtime::Handle,
    /// The tokio runtime this runtime's I/O runs on when ray-core built it
    /// (the blocking facade's, a cluster driver's), kept alive here.
    pub(crate) owned_tokio: Mutex<Option<OwnedTokio>>,
    /// The resource sampler started because the runtime records for
    /// insight (dropped, so stopped, with the runtime).
    #[cfg(feature = "insight")]
    pub(crate) sampling: Mutex<Option<crate::insight::ResourceSampling>>,
    pub(crate) settings: Settings,
    /// The cluster side, when this runtime is a driver or worker of a
    /// cluster (unset when embedded): see [`crate::remote`].
    pub(crate) remote: std::sync::OnceLock<Arc<dyn crate::remote::Remote>>,
    shut_down: AtomicBool,
}

impl Runtime {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        worker: WorkerId,
        node: NodeId,
        job: JobId,
        total: ResourceSet,
        keep_threads: usize,
        store: ObjectStore,
        gcs: Gcs,
        tokio: tokio::runtime::Handle,
        settings: Settings,
    ) -> Self {
        Self {
            worker,
            node,
            job,
            next_seq: AtomicU64::new(1),
            objects: ObjectTable::new(),
            store,
            sched: Mutex::new(LocalQueue::new(total.clone())),
            node_total: total,
            pool: CpuPool::new(
                MAX_RUNNING_JOBS,
                keep_threads,
                settings.pool_spin,
                "ray-cpu",
            ),
            gcs: Mutex::new(gcs),
            pinned_actors: Mutex::new(HashMap::new()),
            escaped_actors: Mutex::new(HashMap::new()),
            live_actors: Mutex::new(HashMap::new()),
            pgs: Mutex::new(HashMap::new()),
            tokio,
            owned_tokio: Mutex::new(None),
            #[cfg(feature = "insight")]
            sampling: Mutex::new(None),
            settings,
            remote: std::sync::OnceLock::new(),
            shut_down: AtomicBool::new(false),
        }
    }

    /// A fresh sequence number: tasks, puts and actors share one counter.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn new_task_id(&self) -> TaskId {
        TaskId::new(self.worker, self.next_seq())
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    pub(crate) fn check_running(&self) -> Result<()> {
        if self.is_shut_down() {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }

    /// Registers the pending return object of `task` and its first ref.
    ///
    /// Fails with `ShutDown` if shutdown ran meanwhile: shutdown fails every
    /// pending object it sees, and this one it might have missed.
    pub(crate) fn pending_return(self: &Arc<Self>, task: TaskId) -> Result<Arc<RefHandle>> {
        let handle = self
            .objects
            .insert(self, task.return_object(), None, Vec::new());
        if self.is_shut_down() {
            self.complete_object(task.return_object(), Err(Error::ShutDown));
            return Err(Error::ShutDown);
        }
        Ok(handle)
    }

    /// Fails at once if no amount of waiting could place `req` here.
    ///
    /// The embedded runtime is one node: every strategy places on it, except
    /// a hard affinity to another node, which can never be met.
    pub(crate) fn check_placeable(&self, what: &str, req: &ResourceRequest) -> Result<Pool> {
        let set = req.checked()?;
        if let (SchedulingStrategy::PlacementGroup { bundle, .. }, Some(pg)) =
            (&req.strategy, &req.group)
        {
            let PgInner::Local(cell) = &pg.inner else {
                return Err(Error::InvalidArgument(format!(
                    "{} belongs to a cluster, not to this embedded runtime",
                    pg.id()
                )));
            };
            let i = cell.choose_bundle(*bundle, set)?;
            return Ok(Pool::Bundle(cell.clone(), i));
        }
        let reason = match req.strategy {
            SchedulingStrategy::NodeAffinity { node, soft: false } if node != self.node => {
                Some(format!(
                    "hard affinity to {node}, which is not in this cluster (only {})",
                    self.node
                ))
            }
            _ if !set.is_subset_of(&self.node_total) => {
                Some("the node can never hold it".to_string())
            }
            _ if !req.labels.allows(&self.settings.node_labels) => Some(format!(
                "no node has the labels {:?} (the node's are {:?})",
                req.labels.hard, self.settings.node_labels
            )),
            _ => None,
        };
        match reason {
            None => Ok(Pool::Node),
            Some(reason) => Err(Error::Infeasible {
                what: what.to_string(),
                reason,
                request: Box::new(set.clone()),
                total: Box::new(self.node_total.clone()),
            }),
        }
    }

    /// Queues a task once its arguments are ready.
    pub(crate) fn enqueue_task(self: &Arc<Self>, spec: TaskSpec) {
        let deps = crate::task::pending_deps(&spec.args);
        let req = spec.resources.clone();
        let pool = spec.pool.clone();
        self.admit_when_ready(deps, pool, req, Dispatch::Task(spec));
    }

    /// Admits `d` into `pool` once `deps` have values: work waiting for its
    /// arguments holds no resources, so it cannot block what produces them.
    /// A failed dependency fails the work when it resolves its arguments.
    pub(crate) fn admit_when_ready(
        self: &Arc<Self>,
        deps: Vec<crate::object_ref::ObjectRef<()>>,
        pool: Pool,
        req: ResourceSet,
        d: Dispatch,
    ) {
        if deps.is_empty() {
            self.admit_in(&pool, req, d);
            return;
        }
        let rt = self.clone();
        crate::task::when_ready(deps, move || rt.admit_in(&pool, req, d));
    }

    /// Hands a task to admission: it runs now or waits for resources.
    pub(crate) fn admit(self: &Arc<Self>, spec: TaskSpec) {
        let req = spec.resources.clone();
        let pool = spec.pool.clone();
        self.admit_in(&pool, req, Dispatch::Task(spec));
    }

    /// Admits work into `pool`: the node's, or a placement group bundle's.
    pub(crate) fn admit_in(self: &Arc<Self>, pool: &Pool, req: ResourceSet, d: Dispatch) {
        match pool {
            Pool::Node => self.admit_dispatch(req, d),
            Pool::Bundle(pg, i) => {
                if self.is_shut_down() {
                    self.fail_dispatch(d, Error::ShutDown);
                } else if let Some(d) = pg.admit(self, *i, req, d) {
                    self.run_dispatch(d);
                }
            }
        }
    }

    pub(crate) fn admit_dispatch(self: &Arc<Self>, req: ResourceSet, d: Dispatch) {
        if self.is_shut_down() {
            self.fail_dispatch(d, Error::ShutDown);
            return;
        }
        let admission = self.sched.lock().submit(req, d);
        match admission {
            Admission::Run(d) => self.run_dispatch(d),
            Admission::Queued => {}
            Admission::Infeasible(d, inf) => {
                let what = dispatch_name(&d);
                self.fail_dispatch(
                    d,
                    Error::Infeasible {
                        what,
                        reason: "the node can never hold it".into(),
                        request: Box::new(inf.request),
                        total: Box::new(inf.total),
                    },
                );
            }
        }
    }

    /// Sends admitted work to the pool.
    pub(crate) fn run_dispatch(self: &Arc<Self>, d: Dispatch) {
        if let Dispatch::ReservePg(pg) = d {
            // Nothing to run: the reservation is the admission itself.
            pg.reserved(self);
            return;
        }
        let rt = self.clone();
        let job = Box::new(move || {
            let mut next = Some(d);
            while let Some(d) = next.take() {
                next = match d {
                    Dispatch::Task(spec) => rt.run_task(spec),
                    Dispatch::CreateActor(cell) => {
                        cell.construct(&rt);
                        None
                    }
                    Dispatch::ReservePg(pg) => {
                        pg.reserved(&rt);
                        None
                    }
                };
            }
        });
        if self.pool.execute(job).is_err() {
            // The pool is shut down; shutdown fails every pending object.
            tracing::debug!(target: "ray::task", "dispatch after shutdown dropped");
        }
    }

    pub(crate) fn fail_dispatch(self: &Arc<Self>, d: Dispatch, err: Error) {
        match d {
            Dispatch::Task(spec) => {
                self.complete_object_in(spec.task.return_object(), spec.ret.as_deref(), Err(err))
            }
            Dispatch::CreateActor(cell) => cell.fail(err.to_string()),
            Dispatch::ReservePg(pg) => pg.remove(self, &err.to_string()),
        }
    }

    /// Gives resources back and starts whatever now fits.
    pub(crate) fn release_resources(self: &Arc<Self>, req: &ResourceSet) {
        if let Some(d) = self.release_resources_take_next(req) {
            self.run_dispatch(d);
        }
    }

    /// Gives resources back; of the work that now fits, returns the first
    /// for the caller to run and sends the rest to the pool.
    pub(crate) fn release_resources_take_next(
        self: &Arc<Self>,
        req: &ResourceSet,
    ) -> Option<Dispatch> {
        if req.is_empty() {
            return None;
        }
        // Usually one item fits (the freed CPU's worth): that one goes
        // back without touching the heap; only further ones are collected.
        let mut rest = Vec::new();
        let first = {
            let mut sched = self.sched.lock();
            sched.release(req);
            let first = sched.pop_runnable().map(|(_, d)| d);
            if first.is_some() {
                while let Some((_, d)) = sched.pop_runnable() {
                    rest.push(d);
                }
            }
            first
        };
        for d in rest {
            self.run_dispatch(d);
        }
        first
    }

    /// Gives resources back to `pool`; returns the first work that now
    /// fits for the caller to run, and sends the rest to the CPU pool.
    pub(crate) fn release_to_take_next(
        self: &Arc<Self>,
        pool: &Pool,
        req: &ResourceSet,
    ) -> Option<Dispatch> {
        match pool {
            Pool::Node => self.release_resources_take_next(req),
            Pool::Bundle(pg, i) => {
                let mut ready = pg.release(*i, req).into_iter();
                let first = ready.next();
                for d in ready {
                    self.run_dispatch(d);
                }
                first
            }
        }
    }

    /// Gives resources back to `pool` and starts whatever now fits.
    pub(crate) fn release_to(self: &Arc<Self>, pool: &Pool, req: &ResourceSet) {
        if let Some(d) = self.release_to_take_next(pool, req) {
            self.run_dispatch(d);
        }
    }

    /// Takes resources back in `pool` after a blocking wait, even past the total.
    pub(crate) fn acquire_forced_in(&self, pool: &Pool, req: &ResourceSet) {
        if req.is_empty() {
            return;
        }
        match pool {
            Pool::Node => self.sched.lock().acquire_forced(req),
            Pool::Bundle(pg, i) => pg.acquire_forced(*i, req),
        }
    }

    /// Where a finished value goes: inline if small, else the object store.
    /// A store with no room is waited on (up to `put_timeout`), except on
    /// a thread of an async runtime: there the bytes come back (`Ok(Err)`)
    /// for the caller to wait on the runtime (see
    /// `Runtime::complete_object_in`).
    pub(crate) fn store_value_now(
        &self,
        id: ObjectId,
        buf: ObjectBuffer,
    ) -> Result<std::result::Result<Value, ObjectBuffer>> {
        if buf.len() <= self.settings.max_inline_bytes {
            return Ok(Ok(Value::Inline(buf)));
        }
        match self.store.try_put(id, buf.clone()) {
            // Already there: objects are immutable, the same id holds the
            // same bytes (a value fetched again while an earlier fetch's
            // put, waiting for room, landed meanwhile).
            Ok(()) | Err(ray_store::StoreError::AlreadyExists { .. }) => Ok(Ok(Value::Stored)),
            Err(ray_store::StoreError::Full { .. })
                if tokio::runtime::Handle::try_current().is_ok() =>
            {
                Ok(Err(buf))
            }
            Err(ray_store::StoreError::Full { .. }) => {
                let timeout = self.settings.put_timeout;
                let put = self.store.put(id, buf, timeout);
                let _enter = self.tokio.enter();
                match futures::executor::block_on(put) {
                    Ok(()) | Err(ray_store::StoreError::AlreadyExists { .. }) => {
                        Ok(Ok(Value::Stored))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// On a cluster, the arguments of a task, call or actor creation
    /// whose values are together over [`MAX_INLINE_MESSAGE_BYTES`] travel
    /// as objects this process owns, by reference, not inside the work
    /// message (as Ray puts large arguments in its object store): a frame
    /// over the transport's cap (64 MiB) used to end the work stream it
    /// shared with other work, a false `NodeDied` for everything on it.
    /// Values move out largest first, until those left are within the
    /// limit. The objects are freed with the arguments (at the task's
    /// result, or its last retry's). A store with no room is
    /// `ObjectStoreFull` at once, not a wait: submitting does not block.
    pub(crate) fn promote_large_args(self: &Arc<Self>, args: Vec<TaskArg>) -> Result<Vec<TaskArg>> {
        let inline = |a: &TaskArg| match &a.0 {
            ArgKind::Value(buf, _) => buf.len(),
            ArgKind::Ref(_) => 0,
        };
        let limit = MAX_INLINE_MESSAGE_BYTES;
        let mut total: usize = args.iter().map(inline).sum();
        if total <= limit {
            return Ok(args);
        }
        let mut by_size: Vec<usize> = (0..args.len()).collect();
        by_size.sort_unstable_by_key(|&i| std::cmp::Reverse(inline(&args[i])));
        let mut moved = vec![false; args.len()];
        for i in by_size {
            if total <= limit {
                break;
            }
            total -= inline(&args[i]);
            moved[i] = true;
        }
        args.into_iter()
            .zip(moved)
            .map(|(arg, moved)| match arg.0 {
                ArgKind::Value(buf, nested) if moved => {
                    let id = ObjectId::new(self.worker, self.next_seq());
                    crate::trace::object(false, id, buf.len(), self.node, false);
                    self.store.try_put(id, buf)?;
                    let handle = self.objects.insert(self, id, Some(Value::Stored), nested);
                    Ok(TaskArg(ArgKind::Ref(handle)))
                }
                kind => Ok(TaskArg(kind)),
            })
            .collect()
    }

    /// The bytes of a ready value.
    pub(crate) fn read_value(&self, id: ObjectId, value: Value) -> Result<ObjectBuffer> {
        match value {
            Value::Inline(buf) => Ok(buf),
            Value::Stored => self.store.get(id).ok_or_else(|| Error::ObjectLost {
                object: id,
                cause: "missing from the object store".into(),
            }),
            Value::Failed(e) => Err(*e),
        }
    }

    /// The last reference to `id` is gone: free it.
    pub(crate) fn release_object(&self, id: ObjectId) {
        let removed = self.objects.remove(id, |id| {
            self.store.delete(id);
        });
        if let Some(r) = &removed {
            match self.remote.get() {
                Some(remote) => remote.object_freed(id, r.registrations),
                None => self.actor_key_freed(id),
            }
        }
        // `removed` drops here, outside every lock: nested refs it held may
        // release further objects.
        drop(removed);
    }

    /// Embedded: if `id` is an actor's key, the values holding handles to
    /// it are gone: the runtime lets the actor go (it lives on while
    /// handles do).
    fn actor_key_freed(&self, id: ObjectId) {
        let Some(actor) = crate::actor::actor_of_key(id) else {
            return;
        };
        let cell = {
            let mut escaped = self.escaped_actors.lock();
            // A newer key made meanwhile keeps it.
            match escaped.get(&actor) {
                Some((key, _)) if key.strong_count() == 0 => escaped.remove(&actor),
                _ => None,
            }
        };
        drop(cell);
    }

    /// Stops the runtime: queued work fails with `ShutDown`, actors die,
    /// pool threads exit after their current job.
    pub(crate) fn shutdown(self: &Arc<Self>) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        let queued = self.sched.lock().drain_queued();
        for (_, d) in queued {
            self.fail_dispatch(d, Error::ShutDown);
        }
        drop(self.pool.shutdown());
        let groups: Vec<_> = self.pgs.lock().values().cloned().collect();
        for pg in groups {
            pg.remove(self, "the runtime shut down");
        }
        let actors: Vec<_> = self
            .live_actors
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for a in &actors {
            a.fail("the runtime shut down".into());
        }
        drop(actors);
        let pinned: Vec<_> = self.pinned_actors.lock().drain().collect();
        drop(pinned);
        let escaped: Vec<_> = self.escaped_actors.lock().drain().collect();
        drop(escaped);
        self.objects.fail_pending(&Error::ShutDown);
        // What was recorded reaches the views and the log now: the program
        // may end as soon as this returns.
        #[cfg(feature = "insight")]
        if let Some(insight) = crate::recording::current() {
            insight.flush_now();
        }
        let closed = self.remote.get().map(|remote| remote.shutdown());
        let io = self.owned_tokio.lock().take();
        match (io, closed) {
            (Some(io), Some(closed)) => io.retire_after(closed),
            (io, _) => drop(io),
        }
    }
}

/// Sets glibc's malloc to keep blocks below 32 MiB in its heap and to give
/// freed memory back to the kernel only past 64 MiB at the heap's top,
/// once per process. Nothing happens off Linux-glibc or where the
/// environment already tunes malloc (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_TRIM_THRESHOLD_`, `GLIBC_TUNABLES`); a program whose Rust
/// global allocator is not the system one is unaffected (only glibc's
/// `malloc` changes).
///
/// glibc starts by mapping every block from 128 KiB up freshly and
/// unmapping it on free, raising that threshold only as blocks are freed;
/// each new 1 MiB object then faulted in 256 zeroed pages, and W4's speed
/// depended on how the first frees fell (measured in
/// `docs/perf-log/2026-11-figures-from-code-comments.md`). They are the state glibc's
/// own adjustment reaches once a 32 MiB block has been freed; the cost is
/// up to 64 MiB of freed memory a process may keep. Objects of 32 MiB and
/// more still get mappings of their own ([`ray_store::aligned_with_capacity`]
/// backs them with huge pages).
pub fn tune_allocator() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let tuned = [
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
            "GLIBC_TUNABLES",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
        if !tuned {
            set_malloc_thresholds();
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_malloc_thresholds() {
    // SAFETY: mallopt only changes glibc's allocation policy; it is
    // thread-safe (it takes the arena locks) and called with documented
    // parameters and positive values. It returns 0 on a refused value,
    // which leaves the defaults in place: ignored.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_malloc_thresholds() {}

/// A tokio runtime ray-core built for its own I/O ("ray-io" threads that
/// hand insight their partial batch whenever they park).
pub(crate) fn io_runtime(worker_threads: usize) -> std::io::Result<OwnedTokio> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .thread_name("ray-io")
        .on_thread_park(crate::hooks::flush)
        .enable_all()
        .build()
        .map(|rt| OwnedTokio {
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
}

/// A tokio runtime owned by ray-core. Dropping it shuts it down without
/// waiting: it may be dropped on one of its own threads or inside another
/// runtime, where dropping a plain `tokio::runtime::Runtime` panics.
pub(crate) struct OwnedTokio {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

/// The longest a retiring I/O runtime waits for its connections' closes.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

impl OwnedTokio {
    /// A handle to spawn on it.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Stops this runtime once `settle` resolves (at most [`CLOSE_GRACE`]
    /// later), waiting on a thread of its own: the caller may be on one of
    /// this runtime's threads, or inside another runtime.
    pub(crate) fn retire_after(
        self,
        settle: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let spawned = std::thread::Builder::new()
            .name("ray-io-exit".into())
            .spawn(move || {
                let io = self;
                io.handle.block_on(async {
                    let _ = tokio::time::timeout(CLOSE_GRACE, settle).await;
                });
            });
        // Without a thread the runtime was dropped with the closure: it
        // stops at once.
        drop(spawned);
    }
}

impl Drop for OwnedTokio {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn dispatch_name(d: &Dispatch) -> String {
    match d {
        Dispatch::Task(spec) => spec.function.name.to_string(),
        Dispatch::CreateActor(cell) => cell.class.name.to_string(),
        Dispatch::ReservePg(pg) => pg.id.to_string(),
    }
}
