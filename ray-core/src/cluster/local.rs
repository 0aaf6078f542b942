//! [`Cluster::local`]: a real multi-process cluster on loopback, for tests,
//! benches and the workload harness.
//!
//! The head (GCS and a node daemon, assembled by [`Head::start`] as for
//! `rayrs start --head`, without the dashboard) and every other node
//! ([`start_node`]) are separate processes: the current executable started again with `RAYRS_DAEMON_*`
//! variables, which the same pre-`main` hook that makes workers (see
//! [`super::worker`]) turns into a daemon. So no other binary has to be
//! built first, and the daemons speak exactly this build's protocol.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ray_proto::wire::InsightExport;
use ray_sched::{Quantity, ResourceSet, CPU, MEMORY};

use super::worker::ProcessError;
use super::{
    control_plane_fingerprint, start_node, GcsClient, Head, HeadConfig, NodeConfig, ADDRESS_FILE,
    CREDENTIALS_DIR,
};
use crate::error::{Error, Result};
use crate::{Config, Ray};
use ray_transport::{ClusterCa, ClusterCredentials, Endpoint, EndpointConfig, Role};

const VAR_KIND: &str = "RAYRS_DAEMON";
const VAR_DIR: &str = "RAYRS_DAEMON_DIR";
pub(super) const VAR_CPUS: &str = "RAYRS_DAEMON_CPUS";
const VAR_ADDRESS: &str = "RAYRS_DAEMON_ADDRESS";
const VAR_HEALTH_MS: &str = "RAYRS_DAEMON_HEALTH_MS";
/// The name of the node's policy set.
const VAR_POLICIES: &str = "RAYRS_DAEMON_POLICIES";
/// The node's labels, `k=v` pairs joined by commas.
const VAR_LABELS: &str = "RAYRS_DAEMON_LABELS";
/// Bounds a daemon's TLS handshakes and its connecting to the GCS.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);

/// How [`Cluster::local_with`] sets the cluster up.
#[derive(Debug, Clone)]
pub struct LocalClusterConfig {
    /// CPUs each node offers (default 2).
    pub cpus_per_node: f64,
    /// A node silent this long is dead (default 1 s, short as tests kill
    /// nodes: a busy node still heartbeats, from a thread of its own, and
    /// the GCS does not count its own stalls as a node's silence); nodes
    /// heartbeat and refresh their view five times as often.
    pub health_timeout: Duration,
    /// How long to wait for every node to join (default 30 s).
    pub start_timeout: Duration,
    /// Labels of each node, by start order (the head first); nodes past
    /// the list's end have none.
    pub node_labels: Vec<BTreeMap<String, String>>,
    /// The policy set every node schedules with, by the name it was
    /// registered under ([`policy_set!`](crate::policy_set); default
    /// `"standard"`, Ray's). The node processes run this program, so a set
    /// it registers is there.
    pub policies: String,
    /// More environment for every node process, and so for their workers
    /// (e.g. `RUST_LOG`, or the fault injection of
    /// [`ABORT_ON_TAKE`](crate::cluster::testing::ABORT_ON_TAKE)).
    pub env: Vec<(String, String)>,
}

impl Default for LocalClusterConfig {
    fn default() -> Self {
        Self {
            cpus_per_node: 2.0,
            health_timeout: Duration::from_secs(1),
            start_timeout: Duration::from_secs(30),
            node_labels: Vec::new(),
            policies: super::policy_sets::STANDARD.into(),
            env: Vec::new(),
        }
    }
}

/// A head and `n - 1` more nodes, each a separate process on loopback;
/// everything is killed and its directory removed on drop.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    address: SocketAddr,
    /// Index 0 is the head.
    nodes: Vec<Option<Child>>,
    /// How its nodes were started (nodes added later start the same way).
    config: LocalClusterConfig,
}

impl Cluster {
    /// Starts a head and `n - 1` nodes (2 CPUs each) and waits until all
    /// `n` are registered.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `n == 0`; [`Error::Cluster`] if a
    /// process cannot start or the nodes do not join in time.
    pub async fn local(n: usize) -> Result<Cluster> {
        Self::local_with(n, LocalClusterConfig::default()).await
    }

    /// [`Cluster::local`] with explicit settings.
    ///
    /// # Errors
    ///
    /// As [`Cluster::local`].
    pub async fn local_with(n: usize, config: LocalClusterConfig) -> Result<Cluster> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "a cluster needs at least one node".into(),
            ));
        }
        // The same check and words as an embedded runtime's `num_cpus`.
        Quantity::from_f64(config.cpus_per_node)
            .map_err(|e| Error::InvalidArgument(format!("CPU: {e} (cpus_per_node)")))?;
        if super::policy_set(&config.policies).is_none() {
            return Err(Error::InvalidArgument(format!(
                "no policy set named {:?} (this program has {:?})",
                config.policies,
                super::policy_set_names()
            )));
        }
        remove_stale_dirs(&std::env::temp_dir());
        let dir = std::env::temp_dir().join(format!(
            "{LOCAL_DIR_PREFIX}{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::cluster_from(format!("cannot create {}: {e}", dir.display()), e))?;
        remove_at_exit(&dir);
        let ca = ClusterCa::generate().map_err(Error::cluster_source)?;
        let creds = ca.issue("ray-rs-local").map_err(Error::cluster_source)?;
        creds
            .save(&dir.join(CREDENTIALS_DIR))
            .map_err(Error::cluster_source)?;
        let mut me = Cluster {
            dir,
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            nodes: Vec::new(),
            config: config.clone(),
        };
        let deadline = Instant::now() + config.start_timeout;
        me.nodes.push(Some(me.spawn("head", None, &config, 0)?));
        let addr_file = me.dir.join(ADDRESS_FILE);
        me.address = loop {
            if let Some(a) = std::fs::read_to_string(&addr_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break a;
            }
            if Instant::now() > deadline {
                return Err(Error::cluster("the head did not start in time"));
            }
            me.check_alive()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        for _ in 1..n {
            let child = me.spawn("node", Some(me.address), &config, me.nodes.len())?;
            me.nodes.push(Some(child));
        }
        me.wait_for_nodes(n, deadline, &creds).await?;
        Ok(me)
    }

    fn spawn(
        &self,
        kind: &str,
        address: Option<SocketAddr>,
        config: &LocalClusterConfig,
        index: usize,
    ) -> Result<Child> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::cluster_from(format!("cannot find this executable: {e}"), e))?;
        let mut cmd = Command::new(exe);
        cmd.env(VAR_KIND, kind)
            .env(VAR_DIR, &self.dir)
            .env(VAR_CPUS, config.cpus_per_node.to_string())
            .env(VAR_HEALTH_MS, config.health_timeout.as_millis().to_string())
            .env(VAR_POLICIES, &config.policies)
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        if let Some(labels) = config.node_labels.get(index) {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            cmd.env(VAR_LABELS, pairs.join(","));
        }
        if let Some(a) = address {
            cmd.env(VAR_ADDRESS, a.to_string());
        }
        die_with_parent(&mut cmd);
        // A group of its own, which its workers join: pausing a node
        // pauses them too, as a frozen machine would.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.spawn()
            .map_err(|e| Error::cluster_from(format!("cannot start a {kind} process: {e}"), e))
    }

    fn check_alive(&mut self) -> Result<()> {
        for (i, slot) in self.nodes.iter_mut().enumerate() {
            if let Some(child) = slot {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(Error::cluster(format!(
                        "node process {i} exited early: {status}"
                    )));
                }
            }
        }
        Ok(())
    }

    async fn wait_for_nodes(
        &mut self,
        n: usize,
        deadline: Instant,
        creds: &ClusterCredentials,
    ) -> Result<()> {
        let (_endpoint, client) = self.gcs_client(creds).await?;
        loop {
            let alive = client
                .nodes()
                .await
                .map(|ns| ns.iter().filter(|n| n.alive).count())
                .unwrap_or(0);
            if alive >= n {
                // Daemons learn of each other from the GCS's node events
                // (their heartbeat refresh is the fallback): give those a
                // moment to arrive.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::cluster(format!(
                    "only {alive} of {n} nodes joined in time"
                )));
            }
            self.check_alive()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The GCS address drivers join.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// The directory of the cluster credentials.
    pub fn credentials(&self) -> PathBuf {
        self.dir.join(CREDENTIALS_DIR)
    }

    /// A driver configuration that joins this cluster.
    pub fn config(&self) -> Config {
        Config {
            address: Some(self.address()),
            credentials: Some(self.credentials()),
            ..Config::default()
        }
    }

    /// Joins this cluster as the driver of a new job.
    ///
    /// # Errors
    ///
    /// What [`crate::init_with`] returns.
    pub async fn connect(&self) -> Result<Ray> {
        crate::init_with(self.config()).await
    }

    /// The directory where the head keeps each recording job's insight
    /// event log (`job-<id>.log`).
    pub fn insight_dir(&self) -> PathBuf {
        self.dir.join("insight")
    }

    /// One insight view of `job` (`None`: the latest job that recorded), as
    /// the head builds it from the records every process shipped: what
    /// `rayrs insight export --address` prints. `at_nanos` replays the
    /// head's event log up to that time since the job started; `filter` is
    /// a context label `key=value`.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] with the head's reason (no such job, an unknown
    /// view or format), or when the head cannot be reached.
    pub async fn insight_export(
        &self,
        job: Option<ray_proto::JobId>,
        view: &str,
        format: &str,
        at_nanos: Option<u64>,
        filter: Option<&str>,
    ) -> Result<String> {
        let creds = ClusterCredentials::load(&self.credentials()).map_err(Error::cluster_source)?;
        let endpoint = Endpoint::bind(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            &creds,
            EndpointConfig::new(Role::Cli, control_plane_fingerprint()),
        )
        .map_err(Error::cluster_source)?;
        let client = GcsClient::connect(&endpoint, self.address, Duration::from_secs(10))
            .await
            .map_err(Error::cluster_source)?;
        client
            .insight_export(InsightExport {
                job,
                view: view.into(),
                format: format.into(),
                at_nanos,
                filter: filter.map(str::to_owned),
                metric: None,
                fold: None,
            })
            .await
            .map_err(Error::cluster_source)
    }

    /// The process ids of the node processes (index 0: the head).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.nodes
            .iter()
            .map(|c| c.as_ref().map(Child::id))
            .collect()
    }

    /// Starts one more node process, as the others were started, and waits
    /// until the GCS counts it alive; returns its index (for
    /// [`Cluster::kill_node`] and [`Cluster::pids`]). Its node id is the
    /// next the GCS hands out.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] if it cannot be started or does not join within
    /// the cluster's start timeout.
    pub async fn add_node(&mut self) -> Result<usize> {
        let creds = ClusterCredentials::load(&self.credentials()).map_err(Error::cluster_source)?;
        let (_endpoint, client) = self.gcs_client(&creds).await?;
        let newest = |nodes: &[ray_proto::wire::NodeEntry]| nodes.iter().map(|n| n.id).max();
        let before = newest(&client.nodes().await.map_err(Error::cluster_source)?);
        let index = self.nodes.len();
        let child = self.spawn("node", Some(self.address), &self.config.clone(), index)?;
        self.nodes.push(Some(child));
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let nodes = client.nodes().await.unwrap_or_default();
            let joined = nodes.iter().any(|n| n.alive && Some(n.id) > before);
            if joined {
                return Ok(index);
            }
            if Instant::now() > deadline {
                return Err(Error::cluster("the added node did not join in time"));
            }
            self.check_alive()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A GCS client of this cluster's own, with the endpoint it uses
    /// (kept alive by the caller).
    async fn gcs_client(&self, creds: &ClusterCredentials) -> Result<(Endpoint, GcsClient)> {
        let endpoint = Endpoint::bind(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            creds,
            EndpointConfig::new(Role::Cli, control_plane_fingerprint()),
        )
        .map_err(Error::cluster_source)?;
        let client = GcsClient::connect(&endpoint, self.address, Duration::from_secs(10))
            .await
            .map_err(Error::cluster_source)?;
        Ok((endpoint, client))
    }

    /// Kills node process `i` (0 is the head) with SIGKILL, as a crash would.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes.get_mut(i).and_then(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(unix)]
impl Cluster {
    /// Pauses node process `i` and its workers with SIGSTOP, as a frozen
    /// machine or a long stall would: they stop heartbeating and answering
    /// without closing a connection. Nothing happens if it is gone.
    pub fn pause_node(&self, i: usize) {
        self.signal_node(i, libc::SIGSTOP);
    }

    /// Resumes node process `i` and its workers (SIGCONT) after
    /// [`Cluster::pause_node`]. A node the GCS declared dead meanwhile
    /// learns so at its next heartbeat and exits, its workers with it.
    pub fn resume_node(&self, i: usize) {
        self.signal_node(i, libc::SIGCONT);
    }

    fn signal_node(&self, i: usize, signal: libc::c_int) {
        let Some(Some(child)) = self.nodes.get(i) else {
            return;
        };
        let Ok(group) = libc::pid_t::try_from(child.id()) else {
            return;
        };
        // SAFETY: `kill` only sends a signal; the negative pid names the
        // process group the node was started in (its own, with its workers).
        unsafe {
            libc::kill(-group, signal);
        }
    }

    /// Waits up to `within` for node process `i` to exit by itself; returns
    /// its exit status, or `None` if it is still running (or was killed
    /// and reaped already).
    pub async fn wait_node_exit(&mut self, i: usize, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let child = self.nodes.get_mut(i)?.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.nodes[i] = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Nodes first, the head last, so no node reports a dead GCS.
        for slot in self.nodes.iter_mut().rev() {
            if let Some(mut child) = slot.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        forget_at_exit(&self.dir);
    }
}

/// How a local cluster's directory is named: the prefix, then the pid of
/// the process that made it and a counter.
const LOCAL_DIR_PREFIX: &str = "rayrs-local-";

/// The directories of this process's local clusters not dropped yet: removed
/// when the process exits through `exit` (e.g. `std::process::exit`, which
/// runs no destructor).
static LIVE_DIRS: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

fn remove_at_exit(dir: &Path) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        extern "C" fn remove_live_dirs() {
            // At exit no other thread of ours may be holding the lock for
            // long; one that is is skipped rather than waited for.
            if let Some(dirs) = LIVE_DIRS.try_lock() {
                for dir in dirs.iter() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
        // SAFETY: `atexit` only records a function pointer; the function
        // takes no arguments and never unwinds (it ignores every error).
        unsafe {
            libc::atexit(remove_live_dirs);
        }
    });
    LIVE_DIRS.lock().push(dir.to_path_buf());
}

fn forget_at_exit(dir: &Path) {
    LIVE_DIRS.lock().retain(|d| d != dir);
}

/// Removes the local-cluster directories in `tmp` whose process is gone
/// (killed before it could clean up).
fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(LOCAL_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !process_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether process `pid` exists (signal 0 probes without sending).
fn process_alive(pid: i32) -> bool {
    // SAFETY: `kill` with signal 0 sends nothing; it only checks.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Makes the child die when this process dies, even by SIGKILL (Linux:
/// `PR_SET_PDEATHSIG`), so no daemon or worker outlives its parent.
pub(super) fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls `prctl`, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Runs a daemon when this process was started as one by
/// [`Cluster::local`]; returns `None` otherwise.
pub(crate) fn daemon_from_env() -> Option<std::result::Result<(), ProcessError>> {
    let kind = std::env::var(VAR_KIND).ok()?;
    Some(run_daemon(&kind))
}

fn run_daemon(kind: &str) -> std::result::Result<(), ProcessError> {
    let dir = PathBuf::from(std::env::var(VAR_DIR).map_err(|_| ProcessError::Unset(VAR_DIR))?);
    let cpus: f64 = std::env::var(VAR_CPUS)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let health_ms: u64 = std::env::var(VAR_HEALTH_MS)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let labels: BTreeMap<String, String> = std::env::var(VAR_LABELS)
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let policies = std::env::var(VAR_POLICIES)
        .ok()
        .and_then(|name| super::policy_set(&name))
        .unwrap_or(ray_sched::Policies::standard);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ray-daemon")
        .enable_all()
        .build()
        .map_err(ProcessError::Tokio)?;
    tokio.block_on(async move {
        let creds = ClusterCredentials::load(&dir.join(CREDENTIALS_DIR))?;
        // Memory as `rayrs start` and an embedded runtime detect it: the
        // default share of the machine's (tasks asking for memory used to
        // find none on a local cluster).
        let memory = crate::machine::detect().default_memory_bytes();
        let resources = ResourceSet::new()
            .with(
                CPU,
                Quantity::from_f64(cpus).map_err(|source| ProcessError::Cpus { source })?,
            )
            .with(MEMORY, Quantity::from_units(memory));
        if kind == "head" {
            let head = Head::start(
                HeadConfig {
                    bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                    dir,
                    resources,
                    labels: labels.clone(),
                    health_timeout: Duration::from_millis(health_ms),
                    timeout: DAEMON_TIMEOUT,
                    dashboard: None,
                    limits: Default::default(),
                    policies,
                },
                &creds,
            )
            .await?;
            return Err(head.run().await.into());
        }
        let gcs = std::env::var(VAR_ADDRESS)
            .ok()
            .and_then(|a| a.parse().ok())
            .ok_or(ProcessError::Unset(VAR_ADDRESS))?;
        let node = start_node(
            NodeConfig {
                gcs,
                credentials_dir: dir.join(CREDENTIALS_DIR),
                dir,
                resources,
                labels,
                timeout: DAEMON_TIMEOUT,
                limits: Default::default(),
                policies,
            },
            &creds,
        )
        .await?;
        Err(node.run().await.into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_directories_of_dead_processes_go_and_live_ones_stay() {
        let tmp = std::env::temp_dir().join(format!("rayrs-stale-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        // A process that has exited: its pid names no live process.
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let dead = child.id();
        child.wait().expect("reap");
        let stale = tmp.join(format!("{LOCAL_DIR_PREFIX}{dead}-0"));
        let live = tmp.join(format!("{LOCAL_DIR_PREFIX}{}-0", std::process::id()));
        let other = tmp.join("unrelated-7");
        for d in [&stale, &live, &other] {
            std::fs::create_dir_all(d.join("credentials")).unwrap();
        }
        remove_stale_dirs(&tmp);
        assert!(!stale.exists(), "the dead process's directory is removed");
        assert!(live.exists() && other.exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
