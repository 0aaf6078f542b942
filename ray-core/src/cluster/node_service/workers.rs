//! The worker process of each job on this node: started on first use from
//! the job's cached binary, refused if its build fingerprint differs from
//! the job's, stopped (SIGTERM, then SIGKILL) when the job ends.
//!
//! Which work shares a process: every lease of a job on this node runs in
//! the job's one worker process (fast: no process per task or actor, and
//! objects pass within it), except an isolated lease (an actor created with
//! `isolated()`), which gets a worker process of its own, started for it
//! and stopped when the lease ends, so a crash there takes only that
//! actor.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ray_proto::wire::{BuildFingerprint, JobBuild, Message, WorkerDied};
use ray_proto::{JobId, TaskId, WorkerId};
use ray_transport::Envelope;
use tokio::sync::oneshot;

use super::NodeService;
use crate::cluster::worker::{WorkerEnv, WorkerStartError};

/// How long a prestart waits for the job's binary to reach the GCS.
const PRESTART_FETCH_FOR: Duration = Duration::from_secs(30);
/// How long a started worker has to report in.
const WORKER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// A started worker's id and address, or why it did not start.
type Started = Result<(WorkerId, String), WorkerStartError>;

/// The worker process of one job on this node.
#[derive(Default)]
pub(super) struct JobWorker {
    started: tokio::sync::OnceCell<Started>,
    ready: Mutex<Option<oneshot::Sender<Started>>>,
    expected: Mutex<Option<BuildFingerprint>>,
    pid: Mutex<Option<u32>>,
    /// Tells the worker's waiter to stop it (SIGTERM, then SIGKILL).
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// The job binary it runs (kept in the node's cache while it runs).
    pub(super) binary: Mutex<Option<[u8; 32]>>,
}

impl JobWorker {
    /// Stops the worker process, if it was started: see [`STOP_GRACE`].
    pub(super) fn stop(&self) {
        if let Some(stop) = self.stop.lock().take() {
            let _ = stop.send(());
        }
    }
}

impl NodeService {
    /// Answers a worker reporting in ([`WorkerReady`](ray_proto::wire::WorkerReady)): it is this
    /// node's worker of `job` only if it was built as the job was.
    pub(super) fn worker_ready(
        &self,
        job: JobId,
        worker: WorkerId,
        address: String,
        fingerprint: BuildFingerprint,
        pid: u32,
        lease: Option<TaskId>,
    ) -> Message {
        let inner = &self.inner;
        let w = match lease {
            Some(lease) => inner
                .isolated
                .lock()
                .get(&lease)
                .filter(|(j, _)| *j == job)
                .map(|(_, w)| w.clone()),
            None => inner.jobs.lock().get(&job).cloned(),
        };
        let Some(w) = w else {
            return Message::Refused {
                reason: format!("{} runs no worker of {job}", inner.node),
            };
        };
        let expected = *w.expected.lock();
        let tx = w.ready.lock().take();
        if expected != Some(fingerprint) {
            let err = WorkerStartError::OtherBuild {
                worker,
                pid,
                built: fingerprint,
                job,
                expected,
            };
            let reason = err.to_string();
            if let Some(tx) = tx {
                let _ = tx.send(Err(err));
            }
            return Message::Refused { reason };
        }
        match tx {
            Some(tx) => {
                let _ = tx.send(Ok((worker, address)));
                Message::Ok
            }
            None => Message::Refused {
                reason: format!("{job} already has a worker on {}", inner.node),
            },
        }
    }

    /// Starts the worker of running job `job` ahead of its first lease
    /// here, once per job and node: the binary is fetched (the driver uploads it
    /// just after registering, so a miss is retried for a while), then the
    /// process is started as a lease would start it. A lease arriving
    /// meanwhile waits for the same start. Nothing happens for a job that
    /// has ended or whose build the GCS does not know.
    pub(super) fn prestart(&self, job: JobId, build: Option<JobBuild>) {
        let Some(build) = build else { return };
        if self.inner.ended.lock().contains(&job) {
            return;
        }
        if !self.inner.prestarted.lock().insert(job) {
            // Once per job: a worker that exited is not started again
            // until a lease asks for it.
            return;
        }
        let w = self.inner.jobs.lock().entry(job).or_default().clone();
        let me = self.clone();
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            let deadline = tokio::time::Instant::now() + PRESTART_FETCH_FOR;
            loop {
                if me.inner.ended.lock().contains(&job) {
                    return;
                }
                match me.cached_binary(build.binary_hash).await {
                    Ok(_) => break,
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        tracing::info!(target: "ray::node", job = %job, error = %e, "worker.prestart_gave_up");
                        return;
                    }
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                }
            }
            if me.inner.ended.lock().contains(&job) {
                return;
            }
            let started = w
                .started
                .get_or_init(|| {
                    me.start_worker(job, build.binary_hash, build.fingerprint, w.clone(), None)
                })
                .await;
            if let Err(e) = started {
                tracing::info!(target: "ray::node", job = %job, error = %e, "worker.prestart_failed");
            }
            // The job may have ended while the worker started.
            if me.inner.ended.lock().contains(&job) {
                w.stop();
            }
        });
    }

    /// The worker of `job` here, started on first use.
    pub(super) async fn worker_for(
        &self,
        job: JobId,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
    ) -> Started {
        let w = self.inner.jobs.lock().entry(job).or_default().clone();
        w.started
            .get_or_init(|| self.start_worker(job, binary_hash, fingerprint, w.clone(), None))
            .await
            .clone()
    }

    /// A worker process of `job` for isolated lease `lease` alone.
    pub(super) async fn isolated_worker(
        &self,
        lease: TaskId,
        job: JobId,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
    ) -> Started {
        let w = self
            .inner
            .isolated
            .lock()
            .entry(lease)
            .or_insert_with(|| (job, Arc::default()))
            .1
            .clone();
        let started = w
            .started
            .get_or_init(|| {
                self.start_worker(job, binary_hash, fingerprint, w.clone(), Some(lease))
            })
            .await
            .clone();
        if started.is_err() {
            self.drop_isolated(lease);
        }
        started
    }

    /// Stops and forgets the worker of isolated lease `lease`, if any.
    pub(super) fn drop_isolated(&self, lease: TaskId) {
        let own = self.inner.isolated.lock().remove(&lease);
        if let Some((_, w)) = own {
            w.stop();
        }
    }

    /// Starts `w`, the worker of `job` (of isolated lease `lease` alone,
    /// if given), and watches it until it exits.
    async fn start_worker(
        &self,
        job: JobId,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
        w: Arc<JobWorker>,
        lease: Option<TaskId>,
    ) -> Started {
        let inner = &self.inner;
        *w.binary.lock() = Some(binary_hash);
        let path = self.cached_binary(binary_hash).await?;
        let (tx, rx) = oneshot::channel();
        *w.ready.lock() = Some(tx);
        *w.expected.lock() = Some(fingerprint);
        let node_addr = inner
            .endpoint
            .local_addr()
            .map_err(|e| WorkerStartError::NodeAddress(Arc::new(e)))?;
        let node_addr = if node_addr.ip().is_unspecified() {
            SocketAddr::new(inner.config.bind_ip, node_addr.port())
        } else {
            node_addr
        };
        let env = WorkerEnv {
            gcs: inner.gcs_addr,
            node: node_addr,
            node_id: inner.node,
            job,
            credentials: inner.config.credentials_dir.clone(),
            resources: inner.total.clone(),
            binary_hash,
            bind_ip: inner.config.bind_ip,
            object_store_bytes: inner.config.limits.object_store_bytes,
            lease,
        };
        let mut cmd = tokio::process::Command::new(&path);
        for (k, _) in std::env::vars_os() {
            // A worker is not a daemon, whatever started its daemon.
            if k.to_string_lossy().starts_with("RAYRS_DAEMON") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.to_vars())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(false);
        crate::cluster::local::die_with_parent(cmd.as_std_mut());
        let mut child = cmd.spawn().map_err(|e| WorkerStartError::Spawn {
            path: path.clone(),
            source: Arc::new(e),
        })?;
        let pid = child.id().unwrap_or(0);
        *w.pid.lock() = Some(pid);
        tracing::info!(target: "ray::node", node = %inner.node, job = %job, pid, "worker.started");
        let me = self.clone();
        let watched = w.clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        *w.stop.lock() = Some(stop_tx);
        tokio::spawn(async move {
            let (status, stopped) = tokio::select! {
                status = child.wait() => (status, false),
                Ok(()) = stop_rx => {
                    // Not reaped yet, so the pid is still this worker's.
                    if let Some(pid) = child.id() {
                        terminate(pid);
                    }
                    let status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(status) => status,
                        Err(_) => {
                            let _ = child.start_kill();
                            child.wait().await
                        }
                    };
                    (status, true)
                }
            };
            tracing::info!(target: "ray::node", job = %job, pid, ?status, "worker.exited");
            match lease {
                Some(lease) => {
                    let mut isolated = me.inner.isolated.lock();
                    if isolated
                        .get(&lease)
                        .is_some_and(|(_, c)| Arc::ptr_eq(c, &watched))
                    {
                        isolated.remove(&lease);
                    }
                }
                None => {
                    let current = me.inner.jobs.lock().get(&job).cloned();
                    if current.is_some_and(|c| Arc::ptr_eq(&c, &watched)) {
                        me.inner.jobs.lock().remove(&job);
                    }
                }
            }
            let started = watched
                .started
                .get()
                .and_then(|s| s.as_ref().ok())
                .map(|(id, _)| *id);
            if let (Some(worker), false) = (started, stopped) {
                let status = match &status {
                    Ok(s) => s.to_string(),
                    Err(e) => format!("cannot be waited for: {e}"),
                };
                me.tell_owners(job, lease, worker, pid, status);
            }
            if let Some(tx) = watched.ready.lock().take() {
                let status = status.map_err(Arc::new);
                let _ = tx.send(Err(WorkerStartError::Exited { job, pid, status }));
            }
            match lease {
                Some(lease) => me.release_lease(lease),
                None => me.release_job_leases(job, true),
            }
        });
        match tokio::time::timeout(WORKER_START_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(WorkerStartError::WentAway { job }),
            Err(_) => {
                w.stop();
                Err(WorkerStartError::Timeout {
                    job,
                    after: WORKER_START_TIMEOUT,
                })
            }
        }
    }
}

impl NodeService {
    /// Tells the owner of every lease of `job` here (only of `lease`, for
    /// an isolated lease's worker) that its worker process exited, so
    /// their work is retried or failed at once (a work stream to a dead
    /// process notices only when its connection times out).
    fn tell_owners(
        &self,
        job: JobId,
        lease: Option<TaskId>,
        worker: WorkerId,
        pid: u32,
        status: String,
    ) {
        let isolated = self.inner.isolated.lock();
        let owners: std::collections::BTreeSet<String> = self
            .inner
            .lease_jobs
            .lock()
            .iter()
            .filter(|(l, h)| match lease {
                Some(lease) => **l == lease,
                // The shared worker's leases: not those with their own.
                None => h.job == job && !isolated.contains_key(*l),
            })
            .map(|(_, h)| h.owner.clone())
            .collect();
        drop(isolated);
        tracing::warn!(target: "ray::node", job = %job, worker = %worker, pid, status = %status, owners = owners.len(), "worker.died");
        for owner in owners {
            let Ok(addr) = owner.parse::<SocketAddr>() else {
                continue;
            };
            let notice = WorkerDied {
                worker,
                node: self.inner.node,
                pid,
                status: status.clone(),
            };
            let me = self.clone();
            tokio::spawn(async move {
                if let Ok(conn) = me.inner.conns.get(addr).await {
                    let _ = conn.request(&Envelope::new(notice.into())).await;
                }
            });
        }
    }
}

/// How long a worker told to stop (SIGTERM) has before SIGKILL: it ships
/// its last insight records meanwhile.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Sends SIGTERM to process `pid`: a signal, with nothing to wait for
/// (the worker's waiter reaps it).
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    // `pid` is a child not yet reaped, so it still names that child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}
