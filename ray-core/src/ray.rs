//! [`Ray`]: the handle user code holds, and `init`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ray_gcs::{Gcs, JobInfo, NodeInfo};
use ray_proto::{NodeId, WorkerId};
use ray_sched::{Quantity, ResourceSet, SchedulingStrategy, CPU, GPU, MEMORY};

use crate::actor::{self, ActorHandle, RemoteActor};
use crate::error::{Error, Result};
use crate::object::{self, Object};
use crate::object_ref::{ObjectRef, TaskArg, Waitable};
use crate::options::TaskOptions;
use crate::registry::RemoteFunction;
use crate::runtime::{Runtime, Settings};
use crate::task::TaskSpec;

/// How to start a runtime. `Config::default()` is what [`init`] uses.
#[derive(Clone, Debug)]
pub struct Config {
    /// CPUs of the node (default: the machine's cores). Tasks are admitted
    /// against it (1 CPU each unless asked otherwise).
    pub num_cpus: Option<f64>,
    /// GPUs of the node (default: the GPUs [`machine::detect`](crate::machine::detect)
    /// finds, 0 on a machine without any).
    pub num_gpus: Option<f64>,
    /// The node's `memory` resource, in bytes, that tasks ask for with
    /// `.memory(bytes)` (default: 70 % of the memory available at start, as
    /// Ray does; see [`machine::MEMORY_SHARE`](crate::machine::MEMORY_SHARE)).
    pub memory_bytes: Option<u64>,
    /// Custom resources of the node.
    pub resources: Vec<(String, f64)>,
    /// Object store capacity in bytes (default 2 GiB).
    pub object_store_bytes: u64,
    /// How long a `put` waits for store space before `ObjectStoreFull` (default 10 s).
    pub put_timeout: Duration,
    /// Values up to this size stay in the owner's table instead of the store (default 100 KiB).
    pub max_inline_bytes: usize,
    /// Namespace of actor names (default `"default"`).
    pub namespace: String,
    /// Labels of the embedded node, which `.label(k, v)` selects on (a
    /// cluster's nodes take theirs from `rayrs start --labels`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The cluster to join (`host:port` of its GCS, as `rayrs start --head`
    /// prints it). `None` reads `RAY_ADDRESS`; unset or empty runs embedded.
    pub address: Option<String>,
    /// The cluster credentials directory (default: `RAY_CREDENTIALS`, else
    /// `$RAYRS_DIR/credentials`, else `/tmp/rayrs/credentials`).
    pub credentials: Option<std::path::PathBuf>,
    /// The executable the cluster's workers run for this job (default:
    /// this one). It must be the same build: a worker whose build
    /// fingerprint differs from the driver's is refused by its node.
    pub executable: Option<std::path::PathBuf>,
    /// Record the job for the insight views (default: what the environment
    /// says, see [`InsightOptions::from_env`](crate::insight::InsightOptions::from_env);
    /// off when unset). Embedded, the views live in this process
    /// ([`Ray::insight`]); on a cluster every process of the job records and
    /// ships its records to the head, which builds the views
    /// (`rayrs insight export --address`).
    pub insight: Option<crate::insight::InsightOptions>,
    /// Keep glibc's malloc from returning object-sized memory to the kernel
    /// after every free (default `true`; see
    /// [`tune_allocator`](crate::tune_allocator)). Set `false` to leave the
    /// process's allocator settings alone.
    pub tune_allocator: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            num_cpus: None,
            num_gpus: None,
            memory_bytes: None,
            resources: Vec::new(),
            object_store_bytes: 2 << 30,
            put_timeout: Duration::from_secs(10),
            max_inline_bytes: 100 << 10,
            namespace: "default".into(),
            labels: Default::default(),
            address: None,
            credentials: None,
            executable: None,
            insight: None,
            tune_allocator: true,
        }
    }
}

/// Starts an embedded runtime on the current tokio runtime.
///
/// With no `RAY_ADDRESS` set this runs everything in this process: no
/// sockets, no child processes. With one (or [`Config::address`]) it joins
/// that cluster as a driver, whose network I/O runs on a thread of its own
/// rather than on the caller's runtime. Fails with [`Error::NoRuntime`]
/// outside tokio.
///
/// Each call starts a runtime of its own (unlike `ray.init`, a second call
/// is not an error): embedded, an independent runtime with its own pool
/// and store; on a cluster, a new job. Keep one [`Ray`] and clone it (a
/// cheap handle) to share a runtime; [`Ray::current`] finds it inside a
/// task.
pub async fn init() -> Result<Ray> {
    init_with(Config::default()).await
}

/// [`init`] with explicit settings.
pub async fn init_with(config: Config) -> Result<Ray> {
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|_| Error::NoRuntime("init() must be called inside a tokio runtime"))?;
    match cluster_address(&config) {
        #[cfg(feature = "cluster")]
        Some(address) => crate::cluster::connect_driver(config, address).await,
        #[cfg(not(feature = "cluster"))]
        Some(address) => Err(no_cluster_support(&address)),
        None => start(config, handle),
    }
}

/// The cluster address to join, if any: the config's, else `RAY_ADDRESS`.
pub(crate) fn cluster_address(config: &Config) -> Option<String> {
    config
        .address
        .clone()
        .or_else(|| std::env::var("RAY_ADDRESS").ok())
        .filter(|a| !a.is_empty())
}

/// [`init_with`] for code that is not async: the runtime owns its own tokio
/// runtime. With an address ([`Config::address`] or `RAY_ADDRESS`) it joins
/// that cluster as a driver, like [`init_with`]. Do not call it from inside
/// an async runtime.
pub fn init_blocking(config: Config) -> Result<Ray> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::InvalidArgument(
            "init_blocking was called inside a tokio runtime: use init_with there".into(),
        ));
    }
    match cluster_address(&config) {
        #[cfg(feature = "cluster")]
        Some(address) => {
            futures::executor::block_on(crate::cluster::connect_driver(config, address))
        }
        #[cfg(not(feature = "cluster"))]
        Some(address) => Err(no_cluster_support(&address)),
        None => {
            let tokio = crate::runtime::io_runtime(2)
                .map_err(|e| Error::InvalidArgument(format!("cannot start tokio: {e}")))?;
            let ray = start(config, tokio.handle().clone())?;
            *ray.rt.owned_tokio.lock() = Some(tokio);
            Ok(ray)
        }
    }
}

/// The error of a build without the `cluster` feature asked to join one.
#[cfg(not(feature = "cluster"))]
fn no_cluster_support(address: &str) -> Error {
    Error::InvalidArgument(format!(
        "cannot join the cluster at {address}: this build of ray-core has no cluster \
         support (its `cluster` feature is off)"
    ))
}

fn start(config: Config, handle: tokio::runtime::Handle) -> Result<Ray> {
    if config.tune_allocator {
        crate::runtime::tune_allocator();
    }
    let machine = crate::machine::detect();
    let cpus = config.num_cpus.unwrap_or(machine.cpus as f64);
    let q = |name: &str, x: f64| {
        Quantity::from_f64(x).map_err(|e| Error::InvalidArgument(format!("{name}: {e}")))
    };
    let gpus = config.num_gpus.unwrap_or(machine.gpus.len() as f64);
    let memory = config
        .memory_bytes
        .unwrap_or_else(|| machine.default_memory_bytes());
    let mut total = ResourceSet::new()
        .with(CPU, q(CPU, cpus)?)
        .with(GPU, q(GPU, gpus)?)
        .with(MEMORY, q(MEMORY, memory as f64)?);
    for (name, amount) in &config.resources {
        total.set(name, q(name, *amount)?);
    }
    let keep_threads = q(CPU, cpus)?.ceil_units().max(1) as usize;
    let mut gcs = Gcs::in_memory();
    let job = gcs.next_job_id();
    let node = NodeId(1);
    gcs.register_node(
        NodeInfo {
            id: node,
            address: "embedded".into(),
            resources: total.clone(),
            labels: config.labels.clone(),
        },
        Duration::ZERO,
    )
    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    gcs.add_job(JobInfo {
        id: job,
        driver: std::env::args().next().unwrap_or_default(),
        started_at: Duration::ZERO,
    })
    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let (settings, store) =
        Settings::from_config(&config, crate::pool::SPIN, crate::object_ref::GET_SPIN);
    let insight = insight_options(&config.insight);
    if let Some(options) = &insight {
        install_recording(options)?;
        if config.insight.is_none() && options.log.is_none() && options.dashboard.is_none() {
            // Asked for by `RAYRS_INSIGHT` alone: say where the records go,
            // or a program that does not read them sees nothing happen.
            eprintln!(
                "ray-rs insight: recording into in-memory views (Ray::insight); set \
                 RAYRS_INSIGHT_LOG=FILE to keep an event log for `rayrs insight export`, or \
                 RAYRS_DASHBOARD=1 to serve the dashboard"
            );
        }
    }
    let rt = Runtime::new(
        WorkerId(1),
        node,
        job,
        total,
        keep_threads,
        store,
        gcs,
        handle,
        settings,
    );
    let ray = Ray { rt: Arc::new(rt) };
    // (Without the feature, asking for insight failed above.)
    #[cfg(feature = "insight")]
    if insight.is_some() {
        ray.start_sampling();
    }
    Ok(ray)
}

/// The insight recording asked for: the config's, else the environment's.
/// Installs the process's recording as `options` ask.
#[cfg(feature = "insight")]
fn install_recording(options: &crate::insight::InsightOptions) -> Result<()> {
    crate::recording::install(options).map(drop)
}

/// Without the `insight` feature there is nothing to record with: asking
/// for it is an error rather than a silent no-op.
#[cfg(not(feature = "insight"))]
fn install_recording(_: &crate::insight::InsightOptions) -> Result<()> {
    Err(Error::InvalidArgument(
        "insight recording was asked for (Config::insight or RAYRS_INSIGHT*), but this \
         build of ray-core has no insight support (its `insight` feature is off)"
            .into(),
    ))
}

pub(crate) fn insight_options(
    configured: &Option<crate::insight::InsightOptions>,
) -> Option<crate::insight::InsightOptions> {
    configured
        .clone()
        .or_else(crate::insight::InsightOptions::from_env)
}

/// A handle to a running ray-rs runtime. Cheap to clone.
#[derive(Clone)]
pub struct Ray {
    pub(crate) rt: Arc<Runtime>,
}

/// Resource and object figures of a runtime, for tests and dashboards.
#[derive(Clone, Debug)]
pub struct RuntimeStats {
    /// Objects with live references.
    pub objects: usize,
    /// Bytes held by the object store.
    pub store_used_bytes: u64,
    /// Objects held by the object store.
    pub store_objects: usize,
    /// Tasks and actors waiting for resources.
    pub queued: usize,
    /// The node's total resources.
    pub total: ResourceSet,
    /// Resources not in use.
    pub available: ResourceSet,
    /// Objects this process fetched from other processes of its cluster
    /// (borrowed arguments and values; 0 when embedded). A process keeps
    /// what it fetched, up to 256 MiB, so a second borrower of the same
    /// object does not fetch it again.
    pub fetched_objects: u64,
    /// Bytes of those fetches.
    pub fetched_bytes: u64,
    /// Bytes of fetched objects kept now for later borrowers; a copy goes
    /// when the newest fetches push it out or, for objects of 64 KiB or
    /// more, when its owner frees the object.
    pub fetch_cache_bytes: u64,
    /// Objects this process owns that other processes of its cluster
    /// borrow now (refs they received inside values and still hold; 0
    /// when embedded). Such an object stays until its last borrower drops
    /// its ref.
    pub lent_objects: usize,
}

impl Ray {
    /// The runtime of the task or actor running on this thread.
    pub fn current() -> Result<Ray> {
        crate::context::current()
            .map(|(rt, _)| Ray { rt })
            .ok_or(Error::NoRuntime(
                "Ray::current() is only available inside a task or actor",
            ))
    }

    /// Stores `value` as an immutable object.
    ///
    /// Large values go to the object store; when it is full this waits for
    /// space up to the put timeout, then fails with `ObjectStoreFull`.
    pub async fn put<T: Object>(&self, value: T) -> Result<ObjectRef<T>> {
        let rt = &self.rt;
        rt.check_running()?;
        let enc = object::encode(&value, std::any::type_name::<T>())?;
        let id = ray_proto::ObjectId::new(rt.worker, rt.next_seq());
        crate::trace::object(false, id, enc.buf.len(), rt.node, false);
        let value = if enc.buf.len() <= rt.settings.max_inline_bytes {
            crate::ownership::Value::Inline(enc.buf)
        } else {
            rt.store.put(id, enc.buf, rt.settings.put_timeout).await?;
            crate::ownership::Value::Stored
        };
        let handle = rt.objects.insert(rt, id, Some(value), enc.nested);
        Ok(ObjectRef::from_handle(handle))
    }

    /// Blocking [`put`](Self::put).
    pub fn put_blocking<T: Object>(&self, value: T) -> Result<ObjectRef<T>> {
        let _enter = self.rt.tokio.enter();
        futures::executor::block_on(self.put(value))
    }

    /// Waits until `num_returns` of `refs` are ready or `timeout` passes,
    /// with Ray's contract.
    ///
    /// Returns `(ready, not_ready)`: at most `num_returns` ready refs, in
    /// the order of `refs` (the first ones found ready in that order), and
    /// every other ref, ready or not, in `not_ready`, also in order. A failed
    /// object counts as ready. On timeout `ready` holds what was ready by
    /// then (possibly fewer than `num_returns`).
    ///
    /// `refs` may be typed refs of one type or [`AnyRef`](crate::AnyRef)s
    /// of any types mixed (`ObjectRef::into` makes one).
    ///
    /// The timeout works on any thread (see [`wait_blocking`](Self::wait_blocking)
    /// for code that is not async).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `num_returns` is 0 or larger than
    /// `refs.len()`, or when a ref appears twice in `refs`.
    pub async fn wait<R: Waitable>(
        &self,
        refs: &[R],
        num_returns: usize,
        timeout: Option<Duration>,
    ) -> Result<(Vec<R>, Vec<R>)> {
        check_wait(refs, num_returns)?;
        let fut = WaitFuture {
            refs,
            num_returns,
            guard: None,
        };
        match timeout {
            Some(t) => {
                let _ = crate::timer::timeout(t, fut).await;
            }
            None => fut.await,
        }
        let mut ready = Vec::with_capacity(num_returns);
        let mut not_ready = Vec::with_capacity(refs.len().saturating_sub(num_returns));
        for r in refs {
            if ready.len() < num_returns && Waitable::is_ready(r) {
                ready.push(r.clone());
            } else {
                not_ready.push(r.clone());
            }
        }
        Ok((ready, not_ready))
    }

    /// Blocking [`wait`](Self::wait), for code that is not async: a sync
    /// remote function, an actor method, a plain thread.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_blocking<R: Waitable>(
        &self,
        refs: &[R],
        num_returns: usize,
        timeout: Option<Duration>,
    ) -> Result<(Vec<R>, Vec<R>)> {
        futures::executor::block_on(self.wait(refs, num_returns, timeout))
    }

    /// Gets every ref in order.
    pub async fn get_all<T: Object>(&self, refs: &[ObjectRef<T>]) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(refs.len());
        for r in refs {
            out.push(r.get().await?);
        }
        Ok(out)
    }

    /// The live named actor `name` in the runtime's namespace.
    ///
    /// On a cluster the name is looked up in the GCS (actors are
    /// registered there once alive) and calls go straight to the worker
    /// hosting the actor; dropping this handle does not kill it. It waits
    /// for the GCS, so from async code call it on a multi-thread runtime.
    pub fn get_actor<A: RemoteActor>(&self, name: &str) -> Result<ActorHandle<A>> {
        actor::lookup(&self.rt, name, &self.rt.settings.namespace)
    }

    /// The live named actor `name` in `namespace`.
    pub fn get_actor_in<A: RemoteActor>(
        &self,
        name: &str,
        namespace: &str,
    ) -> Result<ActorHandle<A>> {
        actor::lookup(&self.rt, name, namespace)
    }

    /// Reserves bundles of resources together, laid out by `strategy`.
    ///
    /// Returns at once; [`PlacementGroup::ready`](crate::PlacementGroup::ready) resolves when every bundle
    /// is reserved. On the embedded runtime (one node) `STRICT_SPREAD` with
    /// more than one bundle, or bundles adding up to more than the node has,
    /// fail at once with [`Error::Infeasible`]. On a cluster this process
    /// places the group (plan, then prepare and commit on the chosen
    /// nodes); a group no set of nodes can hold makes `ready` fail with
    /// [`Error::Infeasible`], one that does not fit now waits.
    pub fn placement_group(
        &self,
        bundles: Vec<crate::placement::Bundle>,
        strategy: ray_sched::PlacementStrategy,
    ) -> Result<crate::placement::PlacementGroup> {
        crate::placement::create(&self.rt, bundles, strategy)
    }

    /// The node this handle's runtime runs on.
    pub fn node_id(&self) -> ray_proto::NodeId {
        self.rt.node
    }

    /// Current figures of this runtime.
    pub fn stats(&self) -> RuntimeStats {
        let store = self.rt.store.stats();
        // Count objects before taking `sched`: no lock nests in another.
        let objects = self.rt.objects.len();
        let (fetched_objects, fetched_bytes, fetch_cache_bytes) =
            self.rt.remote.get().map_or((0, 0, 0), |r| r.fetch_counts());
        let lent_objects = self.rt.remote.get().map_or(0, |r| r.lent_objects());
        let sched = self.rt.sched.lock();
        RuntimeStats {
            objects,
            store_used_bytes: store.used_bytes,
            store_objects: store.num_objects,
            queued: sched.queued_len(),
            total: self.rt.node_total.clone(),
            available: sched.resources().available(),
            fetched_objects,
            fetched_bytes,
            fetch_cache_bytes,
            lent_objects,
        }
    }

    /// Stops the runtime: queued work and pending gets fail with
    /// [`Error::ShutDown`], actors die, pool threads exit.
    pub fn shutdown(&self) {
        self.rt.shutdown();
    }

    /// Samples this process's resource use for insight's physical view
    /// until the runtime shuts down.
    #[cfg(feature = "insight")]
    pub(crate) fn start_sampling(&self) {
        let guard = crate::insight::sample_resources(self, crate::recording::SAMPLE_EVERY);
        *self.rt.sampling.lock() = Some(guard);
    }

    /// The insight recording of this process, when the runtime records
    /// ([`Config::insight`], `RAYRS_INSIGHT`): the views, their exports and
    /// the drop counters.
    #[cfg(feature = "insight")]
    pub fn insight(&self) -> Option<crate::insight::Insight> {
        crate::recording::current()
    }

    /// Submits a task (generated code calls this).
    #[doc(hidden)]
    pub fn __submit<R>(
        &self,
        function: &'static RemoteFunction,
        args: Vec<TaskArg>,
        opts: TaskOptions,
    ) -> Result<ObjectRef<R>> {
        let rt = &self.rt;
        rt.check_running()?;
        let remote = rt.remote.get();
        // On a cluster the nodes decide placement; embedded, it is checked here.
        let mut gone = None;
        let pool = match remote {
            Some(remote) => {
                let request = opts.resources.checked()?;
                remote.check_feasible(
                    function.name,
                    request,
                    &opts.resources.strategy,
                    &opts.resources.labels,
                )?;
                if let (Some(group), SchedulingStrategy::PlacementGroup { bundle, .. }) =
                    (&opts.resources.group, &opts.resources.strategy)
                {
                    gone = group.check_cluster_work(*bundle, request)?;
                }
                crate::placement::Pool::Node
            }
            None => rt.check_placeable(function.name, &opts.resources)?,
        };
        opts.check_retries()?;
        let resources = opts.resources.checked()?.clone();
        let args = match remote {
            Some(_) => rt.promote_large_args(args)?,
            None => args,
        };
        let task = rt.new_task_id();
        let handle = rt.pending_return(task)?;
        if let Some(err) = gone {
            // Into a group removed already: it fails, as embedded.
            rt.complete_object(task.return_object(), Err(err));
            return Ok(ObjectRef::from_handle(handle));
        }
        let parent = crate::context::current_trace();
        let parent_span = crate::trace::user_span();
        crate::context::before_child_submit(parent_span);
        crate::trace::submit(task, parent, parent_span, function.name, None);
        let spec = TaskSpec {
            task,
            function,
            args,
            resources,
            pool,
            max_retries: opts.max_retries,
            retry_exceptions: opts.retry_exceptions.clone(),
            attempt: 0,
            parent,
            parent_span,
            trace: None,
            // On a cluster the result comes back by id.
            ret: remote.is_none().then(|| handle.cell.clone()),
        };
        match remote {
            Some(remote) => {
                remote.submit_task(spec, &opts.resources.strategy, &opts.resources.labels)
            }
            None => rt.enqueue_task(spec),
        }
        Ok(ObjectRef::from_handle(handle))
    }
}

/// `wait`'s arguments as Ray checks them.
fn check_wait<R: Waitable>(refs: &[R], num_returns: usize) -> Result<()> {
    if num_returns == 0 {
        return Err(Error::InvalidArgument(
            "wait needs num_returns of at least 1".into(),
        ));
    }
    if num_returns > refs.len() {
        return Err(Error::InvalidArgument(format!(
            "wait for {num_returns} of {} refs",
            refs.len()
        )));
    }
    if refs.len() > 1 {
        let mut seen = hashbrown::HashSet::with_capacity(refs.len());
        if let Some(twice) = refs.iter().find(|r| !seen.insert(r.object_id())) {
            return Err(Error::InvalidArgument(format!(
                "wait needs distinct refs; {} appears twice",
                twice.object_id()
            )));
        }
    }
    Ok(())
}

/// Resolves when `num_returns` refs are ready; blocks the task meanwhile.
struct WaitFuture<'a, R> {
    refs: &'a [R],
    num_returns: usize,
    guard: Option<Option<crate::context::BlockGuard>>,
}

impl<R: Waitable> Future for WaitFuture<'_, R> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut ready = 0;
        for r in self.refs {
            if r.poll_ready(cx.waker()) {
                ready += 1;
            }
        }
        if ready >= self.num_returns {
            self.guard = None;
            Poll::Ready(())
        } else {
            if self.guard.is_none() {
                let ids: Vec<_> = self.refs.iter().map(Waitable::object_id).collect();
                self.guard = Some(crate::context::begin_blocking(&ids));
            }
            Poll::Pending
        }
    }
}
