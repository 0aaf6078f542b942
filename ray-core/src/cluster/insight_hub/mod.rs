//! The head's insight collector: the records every process of a job ships
//! ([`InsightBatch`](ray_proto::wire::InsightBatch)) become that job's
//! views and event log, and `rayrs insight export --address` reads them
//! ([`InsightExport`](ray_proto::wire::InsightExport)).
//!
//! Records arrive with times relative to their process's recording epoch,
//! and span ids and thread indexes unique only within their process. The hub
//! puts them on one time line per job (nanoseconds since the job registered
//! at the head; earlier records, from clock skew, are clamped to 0) and mixes
//! the sending worker's id into span ids and thread indexes, so spans of two
//! processes never meet. The log holds the records as rebased, so replaying
//! it rebuilds exactly the views the hub built live.
//!
//! Memory: each job's [`Views`] are bounded by their [`Limits`](ray_insight::views::Limits); the hub
//! keeps the [`MAX_JOBS`] most recently started jobs and forgets older ones
//! (their logs stay on disk).
//!
//! Files: the hub itself does no I/O. Its logs are written by
//! [`log_files`]' writer on a blocking thread, fed in order under the hub's
//! lock; a replay reads a log with the lock released, once the writer has
//! written every batch accepted before.

mod log_files;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use parking_lot::Mutex;
use ray_dashboard::{self as dashboard, JobEntry as DashboardJob, Source, ViewQuery};
use ray_insight::export::{self, ExportFormat, FlameFold, ViewKind};
use ray_insight::log::Chunk;
use ray_insight::views::FlameMetric;
use ray_insight::{FieldValue, Fields, Record, RecordKind, Sink, Views};
use ray_proto::wire::{InsightExport, NodeEntry};
use ray_proto::{JobId, NodeId, WorkerId};

use log_files::{LogFiles, LogPermit, Opened};

/// Jobs whose views the hub keeps (the most recently started).
pub(crate) const MAX_JOBS: usize = 8;

/// Dead nodes the hub keeps telling new jobs of (the most recently dead);
/// older ones are forgotten.
pub(crate) const MAX_DEAD_NODES: usize = 64;

/// The largest shipped batch the hub decodes, in bytes. A record takes a
/// few hundred bytes once decoded against at least 8 encoded, so this
/// bounds what one hostile batch can make the head allocate (tens of MiB).
pub(crate) const MAX_SHIPPED_BYTES: usize = 1 << 20;

/// One job's collected insight.
struct JobInsight {
    epoch_unix_nanos: u64,
    /// The driver program's name (what the job selector shows).
    driver: Option<String>,
    views: Views,
    /// Records the hub itself wrote into the views (`node.state`) that the
    /// log's queue had no room for: written with the job's next batch, so
    /// the log keeps the order the views took them in. One per node at
    /// most (a newer one replaces it).
    pending_log: Vec<Record>,
    /// Batches that did not decode.
    bad_batches: u64,
    /// Batches taken in: the dashboard's version of the job's views.
    batches: u64,
}

/// Every job's views and logs on the head.
pub(crate) struct InsightHub {
    /// The writer of the jobs' event logs; `None` keeps live views only.
    logs: Option<LogFiles>,
    /// When each job registered, and its driver's name, for the jobs that
    /// have not shipped yet.
    started: BTreeMap<JobId, (u64, String)>,
    jobs: BTreeMap<JobId, JobInsight>,
    /// What the control store says of each node, as the jobs' views were
    /// last told (`node.state` records).
    nodes: BTreeMap<NodeId, NodeState>,
    /// The dead among `nodes`, oldest death first (at most
    /// [`MAX_DEAD_NODES`]).
    dead: std::collections::VecDeque<NodeId>,
}

/// What a `node.state` record says of a node.
#[derive(Debug, Clone, PartialEq)]
struct NodeState {
    alive: bool,
    address: String,
    death_cause: Option<String>,
    cpu: Option<f64>,
    gpu: Option<f64>,
    memory: Option<f64>,
}

impl NodeState {
    fn of(entry: &NodeEntry) -> Self {
        let amount = |name: &str| {
            entry
                .resources
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.raw as f64 / 10_000.0)
        };
        Self {
            alive: entry.alive,
            address: entry.address.clone(),
            death_cause: entry.death_cause.clone(),
            cpu: amount("CPU"),
            gpu: amount("GPU"),
            memory: amount("memory"),
        }
    }

    /// The record that tells a job's views of node `node`, at job time `at_nanos`.
    fn record(&self, node: NodeId, at_nanos: u64) -> Record {
        let mut fields = Fields::new();
        fields.push("node_id", FieldValue::U64(node.0));
        fields.push("alive", FieldValue::Bool(self.alive));
        fields.push("address", FieldValue::Str(self.address.as_str().into()));
        if let Some(cause) = &self.death_cause {
            fields.push("death_cause", FieldValue::Str(cause.as_str().into()));
        }
        for (key, value) in [
            ("cpu_total", self.cpu),
            ("gpu_total", self.gpu),
            ("memory_total", self.memory),
        ] {
            if let Some(value) = value {
                fields.push(key, FieldValue::F64(value));
            }
        }
        Record::event("node.state", "ray::node", at_nanos, fields)
    }
}

fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A 64-bit mix (splitmix64's finaliser): spreads `x` over all bits.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `span` of process `worker` as a cluster-wide span id (0 stays 0: no span).
fn global_span(worker: WorkerId, span: u64) -> u64 {
    if span == 0 {
        return 0;
    }
    mix(mix(worker.0) ^ span).max(1)
}

/// Thread `thread` of process `worker` as a cluster-wide thread index.
fn global_thread(worker: WorkerId, thread: u32) -> u32 {
    (mix(worker.0 ^ (u64::from(thread) << 32)) >> 32) as u32
}

impl InsightHub {
    /// A hub that writes each job's event log under `dir` (`job-<id>.log`),
    /// or keeps live views only.
    ///
    /// # Panics
    ///
    /// With a `dir`, outside a tokio runtime (the logs' writer runs on its
    /// blocking threads).
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            logs: dir.map(LogFiles::start),
            started: BTreeMap::new(),
            jobs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            dead: std::collections::VecDeque::new(),
        }
    }

    /// Job `job`, run by the program `driver`, registered now: its time
    /// line starts here.
    pub(crate) fn job_registered(&mut self, job: JobId, driver: &str) {
        self.started.insert(
            job,
            (unix_nanos_now(), crate::recording::program_name(driver)),
        );
        while self.started.len() > MAX_JOBS {
            self.started.pop_first();
        }
    }

    /// The control store's row of a node changed: when it registered, died
    /// or changed address or capacity (not at each load report), every
    /// job's views are told with a `node.state` record, so the physical
    /// view lists it even if none of the job's work ran there.
    pub(crate) fn node_changed(&mut self, entry: &NodeEntry) {
        let node = NodeState::of(entry);
        if self.nodes.get(&entry.id) == Some(&node) {
            return;
        }
        if !node.alive && !self.nodes.contains_key(&entry.id) {
            // Dead and unknown here: forgotten past the bound (a re-read of
            // the table finds it again), or never seen alive. Not told again.
            return;
        }
        for (job, state) in &mut self.jobs {
            // Stamped at the job's own latest time: a node's change never
            // moves a job's clock (a finished job's would jump to now).
            let record = node.record(entry.id, state.views.now_nanos());
            state.views.accept(std::slice::from_ref(&record));
            let Some(logs) = &self.logs else {
                continue;
            };
            let mut records = std::mem::take(&mut state.pending_log);
            records.retain(|r| r.field("node_id") != record.field("node_id"));
            records.push(record);
            match logs.try_reserve() {
                Some(permit) => permit.write(*job, None, Chunk::from(records)),
                None => state.pending_log = records,
            }
        }
        if !node.alive && self.nodes.get(&entry.id).is_none_or(|n| n.alive) {
            self.dead.push_back(entry.id);
            while self.dead.len() > MAX_DEAD_NODES {
                if let Some(old) = self.dead.pop_front() {
                    self.nodes.remove(&old);
                }
            }
        }
        if node.alive {
            self.dead.retain(|id| *id != entry.id);
        }
        self.nodes.insert(entry.id, node);
    }

    /// Starts keeping `job` if the hub does not yet, forgetting the oldest
    /// jobs to make room: `Some` then, for its log.
    fn open_job(&mut self, job: JobId, fallback_epoch: u64) -> Option<Opened> {
        if self.jobs.contains_key(&job) {
            return None;
        }
        let mut evicted = Vec::new();
        while self.jobs.len() >= MAX_JOBS {
            evicted.extend(self.jobs.pop_first().map(|(old, _)| old));
        }
        let (epoch, driver) = match self.started.remove(&job) {
            Some((epoch, driver)) => (epoch, Some(driver)),
            None => (fallback_epoch, None),
        };
        let mut views = Views::default();
        // The nodes registered so far, idle or not, at the job's start.
        let mut pending_log: Vec<Record> = self
            .nodes
            .iter()
            .map(|(id, node)| node.record(*id, 0))
            .collect();
        views.accept(&pending_log);
        if self.logs.is_none() {
            pending_log.clear();
        }
        self.jobs.insert(
            job,
            JobInsight {
                epoch_unix_nanos: epoch,
                driver,
                views,
                pending_log,
                bad_batches: 0,
                batches: 0,
            },
        );
        Some(Opened {
            epoch_unix_nanos: epoch,
            evicted,
        })
    }

    /// Takes in one shipped batch: `bytes` of `worker` in `job`, times
    /// relative to `epoch_unix_nanos`, and queues it for the job's log on
    /// `log` (reserved before this hub's lock was taken; see
    /// [`accept_shipped`]).
    ///
    /// # Errors
    ///
    /// [`HubError::TooLarge`], [`HubError::Undecodable`]: nothing of the
    /// batch is kept.
    fn accept(
        &mut self,
        job: JobId,
        worker: WorkerId,
        epoch_unix_nanos: u64,
        bytes: &[u8],
        log: Option<LogPermit<'_>>,
    ) -> Result<(), HubError> {
        if bytes.len() > MAX_SHIPPED_BYTES {
            return Err(HubError::TooLarge { len: bytes.len() });
        }
        let decoded = Chunk::decode(bytes);
        let opened = self.open_job(job, epoch_unix_nanos);
        let state = self
            .jobs
            .get_mut(&job)
            .expect("open_job keeps the job it is given");
        let mut chunk = match decoded {
            Ok(chunk) => chunk,
            Err(e) => {
                state.bad_batches += 1;
                if let Some(log) = log {
                    // The job's log is created all the same, with what the
                    // hub wrote into the views.
                    let pending = std::mem::take(&mut state.pending_log);
                    log.write(job, opened, Chunk::from(pending));
                }
                return Err(HubError::Undecodable(e));
            }
        };
        // Only the head says what became of a node.
        let forged = chunk
            .retain_records(|r| !(r.kind == RecordKind::Event && r.schema_name() == "node.state"));
        if forged > 0 {
            tracing::debug!(target: "ray::insight", %job, %worker, forged, "insight.node_state_refused");
        }
        // Sender time t is job time t + (sender epoch - job epoch). A
        // submit's or run's `parent_span` is an id of the process that
        // submitted the work, whatever process recorded it: the owner of
        // the record's task id (a worker runs pushed work under its
        // owner's id).
        let shift = i128::from(epoch_unix_nanos) - i128::from(state.epoch_unix_nanos);
        chunk.rebase(
            shift,
            |span| global_span(worker, span),
            |thread| global_thread(worker, thread),
            |owner, span| global_span(WorkerId(owner), span),
        );
        chunk.apply_to(&mut state.views);
        state.batches += 1;
        if let Some(log) = log {
            let mut logged = Chunk::from(std::mem::take(&mut state.pending_log));
            logged.append(&mut chunk);
            log.write(job, opened, logged);
        }
        Ok(())
    }

    /// The job `job` names (`None`: the most recent), and its state.
    fn pick(&self, job: Option<JobId>) -> Result<(JobId, &JobInsight), dashboard::SourceError> {
        let (job, state) = match job {
            Some(job) => (job, self.jobs.get(&job)),
            None => match self.jobs.last_key_value() {
                Some((job, state)) => (*job, Some(state)),
                None => {
                    return Err(dashboard::SourceError::UnknownJob {
                        reason: "the head has no insight records yet (did the driver set \
                                 Config::insight or RAYRS_INSIGHT=1?)"
                            .into(),
                    })
                }
            },
        };
        match state {
            Some(state) => Ok((job, state)),
            None => Err(dashboard::SourceError::UnknownJob {
                reason: format!(
                    "the head has no insight records of {job} (it keeps the last {MAX_JOBS} \
                     jobs that recorded)"
                ),
            }),
        }
    }
}

/// Takes in one shipped batch (see [`InsightHub::accept`]) without waiting
/// under the lock: room in the log writer's queue is reserved first.
///
/// # Errors
///
/// As [`InsightHub::accept`].
pub(crate) async fn accept_shipped(
    hub: &Mutex<InsightHub>,
    job: JobId,
    worker: WorkerId,
    epoch_unix_nanos: u64,
    bytes: &[u8],
) -> Result<(), HubError> {
    let logs = hub.lock().logs.clone();
    let permit = match &logs {
        Some(logs) => logs.reserve().await,
        None => None,
    };
    hub.lock()
        .accept(job, worker, epoch_unix_nanos, bytes, permit)
}

/// The view `request` asks for (of its job, `None`: the most recent) as
/// text. A replay (an `at_nanos`) waits for the log's writer: call it on a
/// blocking thread.
///
/// # Errors
///
/// A reason for the asker: no such job, an unknown view, format, metric or
/// fold, a bad filter, or `at_nanos` without an event log.
pub(crate) fn export(hub: &Mutex<InsightHub>, request: &InsightExport) -> Result<String, HubError> {
    let view: ViewKind = request.view.parse().map_err(dashboard::SourceError::from)?;
    let format: ExportFormat = request
        .format
        .parse()
        .map_err(dashboard::SourceError::from)?;
    let metric = match request.metric.as_deref() {
        Some(m) => export::parse_metric(m).map_err(dashboard::SourceError::from)?,
        None => FlameMetric::SelfTime,
    };
    let fold = match request.fold.as_deref() {
        Some(f) => FlameFold::from_name(f).ok_or_else(|| HubError::Fold { fold: f.to_owned() })?,
        None => FlameFold::Instance,
    };
    let filter = match request.filter.as_deref() {
        Some(f) => dashboard::parse_filter(f).ok_or_else(|| HubError::Filter {
            filter: f.to_owned(),
        })?,
        None => Vec::new(),
    };
    Ok(render(
        hub,
        &ViewQuery {
            job: request.job.map(|j| j.to_string()),
            view,
            format,
            at_nanos: request.at_nanos,
            filter,
            metric,
            fold,
            summary: None,
        },
    )?)
}

/// Renders `query`: the live views under the hub's lock; a replay from the
/// job's log with the lock released, once the log's writer has written
/// every batch accepted before.
fn render(hub: &Mutex<InsightHub>, query: &ViewQuery) -> Result<String, dashboard::SourceError> {
    let job = query.job.as_deref().map(parse_job).transpose()?;
    let (job, limits, logs) = {
        let hub = hub.lock();
        let (job, state) = hub.pick(job)?;
        if query.at_nanos.is_none() {
            return dashboard::render(&state.views, None, query);
        }
        (job, state.views.limits().clone(), hub.logs.clone())
    };
    let log = logs.and_then(|logs| logs.written(job));
    // A replay builds its own views: only their limits come from the live ones.
    dashboard::render(&Views::new(limits), log.as_deref(), query)
}

/// `job-<hex>`, as [`JobId`] displays itself.
fn parse_job(text: &str) -> Result<JobId, dashboard::SourceError> {
    text.strip_prefix("job-")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .map(JobId)
        .ok_or_else(|| dashboard::SourceError::UnknownJob {
            reason: format!("bad job {text:?}: expected job-<hex>"),
        })
}

/// Why the head's collector refused a batch or an export.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HubError {
    /// A shipped batch over [`MAX_SHIPPED_BYTES`].
    #[error("insight batch of {len} bytes refused: at most {MAX_SHIPPED_BYTES}")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// A shipped batch that does not decode.
    #[error("insight batch does not decode: {0}")]
    Undecodable(#[source] ray_insight::log::LogError),
    /// An export's filter that is not `key=value`.
    #[error("bad filter {filter:?}: expected key=value, or several joined by ','")]
    Filter {
        /// The filter.
        filter: String,
    },
    /// An export's fold that is neither `instance` nor `class`.
    #[error("bad fold {fold:?}: choose instance or class")]
    Fold {
        /// The fold asked for.
        fold: String,
    },
    /// An export the views cannot give: an unknown view, format, metric or
    /// job, or a time with no event log.
    #[error(transparent)]
    Export(#[from] dashboard::SourceError),
    /// The export's blocking task failed.
    #[error("the export failed: {0}")]
    Stopped(#[source] tokio::task::JoinError),
}

/// The head's collector as the dashboard's [`Source`].
pub(crate) struct HubSource(pub(crate) Arc<Mutex<InsightHub>>);

impl Source for HubSource {
    fn jobs(&self) -> Vec<DashboardJob> {
        let hub = self.0.lock();
        let latest = hub.jobs.keys().next_back().copied();
        hub.jobs
            .iter()
            .rev()
            .map(|(job, state)| DashboardJob {
                job: job.to_string(),
                // The driver's program (the page adds the job's id).
                label: state.driver.clone().unwrap_or_else(|| job.to_string()),
                latest: Some(*job) == latest,
            })
            .collect()
    }

    fn stats(&self, job: Option<&str>) -> Result<serde_json::Value, dashboard::SourceError> {
        let job = job.map(parse_job).transpose()?;
        let hub = self.0.lock();
        let (job, state) = hub.pick(job)?;
        Ok(dashboard::stats_json(
            &state.views,
            &job.to_string(),
            state.batches,
        ))
    }

    fn view(&self, query: &ViewQuery) -> Result<String, dashboard::SourceError> {
        render(&self.0, query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_insight::log::{encode_records, read_log};

    /// One shipped batch: task `task` starts running at `at_nanos`.
    fn batch(task: &str, at_nanos: u64) -> Vec<u8> {
        let record = Record {
            kind: RecordKind::SpanNew,
            span: at_nanos + 1,
            parent: 0,
            name: "task.run",
            target: "ray_core::task",
            at_nanos,
            thread: 0,
            fields: [
                ("task_id", FieldValue::Str(task.into())),
                ("function", FieldValue::Str("f".into())),
            ]
            .into_iter()
            .collect(),
        };
        let mut bytes = Vec::new();
        encode_records(&[record], &mut bytes);
        bytes
    }

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rayrs-hub-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir
    }

    /// Waits, on a blocking thread, until the hub's writer has written
    /// everything accepted so far; the path of `job`'s log.
    async fn written(hub: &Mutex<InsightHub>, job: JobId) -> Option<PathBuf> {
        let logs = hub.lock().logs.clone().expect("a hub with a directory");
        tokio::task::spawn_blocking(move || logs.written(job))
            .await
            .expect("the wait ends")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_reach_the_log_in_the_order_the_hub_accepted_them() {
        let dir = temp_dir("order");
        let hub = Mutex::new(InsightHub::new(Some(dir.clone())));
        let tasks = ["t1", "t2", "t3", "t4", "t5"];
        for (at, task) in tasks.iter().enumerate() {
            accept_shipped(&hub, JobId(1), WorkerId(1), 0, &batch(task, at as u64))
                .await
                .expect("accepted");
        }
        let path = written(&hub, JobId(1)).await.expect("the job's log");
        let log = read_log(&path).expect("a log");
        assert!(log.stopped.is_none(), "{:?}", log.stopped);
        let logged: Vec<String> = log
            .records
            .iter()
            .filter_map(|r| match r.field("task_id") {
                Some(FieldValue::Str(t)) => Some(t.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(logged, tasks);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_that_cannot_be_written_loses_no_batch_of_the_live_views() {
        if !std::path::Path::new("/dev/full").exists() {
            return;
        }
        let dir = temp_dir("full");
        // Every write to /dev/full fails as on a full disk (ENOSPC).
        std::os::unix::fs::symlink("/dev/full", dir.join("job-1.log")).expect("a symlink");
        let hub = Mutex::new(InsightHub::new(Some(dir.clone())));
        for at in 0..3 {
            accept_shipped(&hub, JobId(1), WorkerId(1), 0, &batch("t", at))
                .await
                .expect("a full disk refuses no batch");
        }
        assert!(written(&hub, JobId(1)).await.is_some());
        let hub = hub.lock();
        let state = &hub.jobs[&JobId(1)];
        assert_eq!(state.batches, 3);
        assert_eq!(state.views.stats().applied, 3);
        drop(hub);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn node_row(id: u64, alive: bool) -> NodeEntry {
        NodeEntry {
            id: NodeId(id),
            address: format!("10.0.0.{id}:4100"),
            resources: vec![ray_proto::wire::ResourceAmount {
                name: "CPU".into(),
                raw: 40_000,
            }],
            labels: Vec::new(),
            alive,
            death_cause: (!alive).then(|| "no heartbeat for 1.0s".to_owned()),
            used: Vec::new(),
            version: 1,
        }
    }

    /// `(node id, alive)` of every registered node in the job's physical
    /// view (the test's tasks name no node: theirs is `unknown`).
    fn nodes_of(hub: &InsightHub, job: JobId) -> Vec<(String, Option<bool>)> {
        hub.jobs[&job]
            .views
            .snapshot()
            .physical()
            .nodes
            .into_iter()
            .filter_map(|n| Some((n.node_id, Some(n.registration?.alive))))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registered_nodes_show_in_every_job_idle_or_dead_and_reach_its_log() {
        let dir = temp_dir("nodes");
        let hub = Arc::new(Mutex::new(InsightHub::new(Some(dir.clone()))));
        // Node 1 registers before the job records anything, node 2 after.
        hub.lock().node_changed(&node_row(1, true));
        hub.lock().job_registered(JobId(1), "trainer");
        accept_shipped(&hub, JobId(1), WorkerId(1), 0, &batch("t1", 5))
            .await
            .expect("accepted");
        hub.lock().node_changed(&node_row(2, true));
        // A load report changes nothing the views show: no record.
        let mut reported = node_row(2, true);
        reported.version = 9;
        hub.lock().node_changed(&reported);
        hub.lock().node_changed(&node_row(1, false));
        let nodes = nodes_of(&hub.lock(), JobId(1));
        assert_eq!(nodes.len(), 2, "{nodes:?}");
        let alive: Vec<Option<bool>> = nodes.iter().map(|(_, a)| *a).collect();
        assert!(alive.contains(&Some(false)) && alive.contains(&Some(true)));
        // The job selector names the driver.
        assert_eq!(HubSource(hub.clone()).jobs()[0].label, "trainer");

        // The log gets the node records with the next batch, in the order
        // the views took them: replaying it shows the same nodes.
        accept_shipped(&hub, JobId(1), WorkerId(1), 0, &batch("t2", 6))
            .await
            .expect("accepted");
        let path = written(&hub, JobId(1)).await.expect("the job's log");
        let log = read_log(&path).expect("a log");
        let names: Vec<&str> = log.records.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "node.state",
                "task.run",
                "node.state",
                "node.state",
                "task.run"
            ]
        );
        let mut replayed = Views::default();
        replayed.accept(&log.records);
        let replayed: Vec<(String, Option<bool>)> = replayed
            .snapshot()
            .physical()
            .nodes
            .into_iter()
            .filter_map(|n| Some((n.node_id, Some(n.registration?.alive))))
            .collect();
        assert_eq!(replayed, nodes);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_node_change_keeps_a_jobs_clock_and_a_worker_cannot_forge_one() {
        let mut hub = InsightHub::new(None);
        hub.accept(JobId(1), WorkerId(1), 0, &batch("t1", 5_000), None)
            .expect("accepted");
        hub.node_changed(&node_row(1, true));
        hub.node_changed(&node_row(1, false));
        let state = &hub.jobs[&JobId(1)];
        assert_eq!(
            state.views.now_nanos(),
            5_000,
            "the job's clock did not move"
        );
        assert!(state.pending_log.is_empty(), "no log: nothing kept for it");
        // A shipped `node.state` (a worker claiming node 2 died) is refused;
        // the rest of its batch is kept.
        let mut forged = Fields::new();
        forged.push("node_id", FieldValue::U64(2));
        forged.push("alive", FieldValue::Bool(false));
        let records = [Record::event("node.state", "ray::node", 6_000, forged)];
        let mut bytes = Vec::new();
        encode_records(&records, &mut bytes);
        hub.accept(JobId(1), WorkerId(1), 0, &bytes, None)
            .expect("accepted");
        hub.accept(JobId(1), WorkerId(1), 0, &batch("t2", 7_000), None)
            .expect("accepted");
        let nodes = nodes_of(&hub, JobId(1));
        assert_eq!(nodes, [("node-1".to_owned(), Some(false))], "{nodes:?}");
    }

    #[test]
    fn dead_nodes_beyond_the_bound_are_forgotten() {
        let mut hub = InsightHub::new(None);
        let total = MAX_DEAD_NODES as u64 + 10;
        for id in 1..=total {
            hub.node_changed(&node_row(id, true));
            hub.node_changed(&node_row(id, false));
        }
        hub.node_changed(&node_row(total + 1, true));
        assert_eq!(hub.nodes.len(), MAX_DEAD_NODES + 1);
        assert!(!hub.nodes.contains_key(&NodeId(1)), "the oldest death went");
        assert!(hub.nodes.contains_key(&NodeId(total)));
    }

    #[test]
    fn spans_of_two_processes_never_share_an_id_and_zero_stays_zero() {
        let (a, b) = (WorkerId(1), WorkerId(2));
        assert_eq!(global_span(a, 0), 0);
        let ids: std::collections::HashSet<u64> = (1..10_000u64)
            .flat_map(|s| [global_span(a, s), global_span(b, s)])
            .collect();
        assert_eq!(ids.len(), 2 * 9_999);
        assert!(!ids.contains(&0));
        assert_ne!(global_thread(a, 0), global_thread(b, 0));
    }

    #[test]
    fn a_batch_that_does_not_decode_is_refused_and_counted() {
        let mut hub = InsightHub::new(None);
        let err = hub
            .accept(JobId(1), WorkerId(1), 0, &[0xff, 0xff, 0xff], None)
            .unwrap_err();
        assert!(err.to_string().contains("does not decode"), "{err}");
        assert_eq!(hub.jobs[&JobId(1)].bad_batches, 1);
        let hub = Mutex::new(hub);
        let request = |job: u32, at_nanos: Option<u64>, fold: Option<&str>| InsightExport {
            job: Some(JobId(job)),
            view: "logical".into(),
            format: "json".into(),
            at_nanos,
            filter: None,
            metric: None,
            fold: fold.map(str::to_owned),
        };
        assert!(export(&hub, &request(2, None, None)).is_err());
        assert!(export(&hub, &request(1, Some(5), None))
            .unwrap_err()
            .to_string()
            .contains("no event log"));
        assert!(export(&hub, &request(1, None, Some("classes")))
            .unwrap_err()
            .to_string()
            .contains("choose instance or class"));
    }
}
