//! The insight dashboard: the five views in a browser, served over HTTP by
//! the process that holds them (an embedded runtime, or a cluster's head).
//!
//! [`Dashboard::start`] serves, on its own threads (no async runtime):
//!
//! - `/` — the page (every asset is compiled into the binary: no CDN, works
//!   offline), with the access token written into it;
//! - `/api/jobs`, `/api/stats?job=J`, `/api/view?job=J&view=V&format=F[&at=NANOS][&filter=k=v][&metric=M]`
//!   (the same text `rayrs insight export` writes), `/api/flamediff?job=J&before=FOLDED`
//!   (a differential flame graph against a baseline), `/api/summary?job=J&view=V[&at=..][&filter=..][&expand=CLASS][&from=NANOS&to=NANOS]`
//!   (the view summarized for the browser: see [`summary`]), and
//!   `/api/events?job=J[&view=V&...]` (server-sent events every second: the
//!   counters; with a view, its summary first and then only keyed deltas of
//!   what changed, see [`summary::diff`]).
//!
//! Every request must carry the token (`?token=T`, or `Authorization: Bearer
//! T`); anything else is refused with 401 before it is routed. The default
//! bind address is 127.0.0.1 with a random port; another address must be
//! asked for. The server aggregates: the browser receives summaries of
//! the views (bounded whatever the job's size), never raw records.
//!
//! What it shows comes from a [`Source`]: ray-core implements it for its
//! embedded recording and for the head's collector. This module knows no
//! runtime types.

mod http;
pub mod summary;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use ray_insight::export::{ExportFormat, ViewKind};
use ray_insight::views::FlameMetric;
pub use summary::{SummaryLimits, SummaryParams};

/// One job the dashboard can show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEntry {
    /// Its id as the views name it (`job-1`, or `embedded`).
    pub job: String,
    /// What the job selector shows.
    pub label: String,
    /// The job shown when none is asked for.
    pub latest: bool,
}

/// What a view request asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewQuery {
    /// The job (`None`: the latest).
    pub job: Option<String>,
    /// Which view.
    pub view: ViewKind,
    /// In which format.
    pub format: ExportFormat,
    /// As it stood this many nanoseconds into the recording (`None`: now).
    pub at_nanos: Option<u64>,
    /// Only tasks labelled `key = value`.
    pub filter: Option<(String, String)>,
    /// The flame graph's time.
    pub metric: FlameMetric,
    /// Summarized for the browser (JSON, whatever `format` says), narrowed
    /// as these say; `None`: the full export.
    pub summary: Option<SummaryParams>,
}

/// Where the dashboard's views come from: the process's recording.
///
/// Implementations answer from their live views (or replay their event log
/// for `at_nanos`); errors are one line for the person looking.
pub trait Source: Send + Sync + 'static {
    /// The jobs there is something to show for.
    fn jobs(&self) -> Vec<JobEntry>;

    /// The counters of `job` (`None`: the latest) as a JSON object with at
    /// least `now_nanos`, `applied`, `dropped`, `lost` and `version` (which
    /// grows whenever records arrive).
    ///
    /// # Errors
    ///
    /// An unknown job.
    fn stats(&self, job: Option<&str>) -> Result<Value, String>;

    /// One view as text, as `rayrs insight export` writes it.
    ///
    /// # Errors
    ///
    /// An unknown job, or a time that cannot be replayed.
    fn view(&self, query: &ViewQuery) -> Result<String, String>;
}

/// Answers `query` from `views`, or, for a time, by replaying the event log
/// at `log` up to it: the common part of every [`Source`].
///
/// # Errors
///
/// A time asked for with no log, a log that cannot be read, or an export
/// the view does not have.
pub fn render(
    views: &ray_insight::Views,
    log: Option<&std::path::Path>,
    query: &ViewQuery,
) -> Result<String, String> {
    let export = |views: &ray_insight::Views| {
        let snapshot = match &query.filter {
            Some((k, v)) => views.filter(k, v),
            None => views.snapshot(),
        };
        match &query.summary {
            Some(params) => {
                summary::summarize(&snapshot, query.view, params, &SummaryLimits::default())
                    .map(|v| v.to_string())
            }
            None => ray_insight::export::export_with_metric(
                &snapshot,
                query.view,
                query.format,
                query.metric,
            )
            .map_err(|e| e.to_string()),
        }
    };
    match query.at_nanos {
        None => export(views),
        Some(at) => {
            let path = log.ok_or("no event log is kept here, so no time can be replayed")?;
            let contents = ray_insight::log::read_log(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let mut replay = ray_insight::log::Replay::new(views.limits().clone(), Some(at));
            ray_insight::Sink::accept(&mut replay, &contents.records);
            export(replay.views())
        }
    }
}

/// The counters every [`Source::stats`] reports, from `views`.
pub fn stats_json(views: &ray_insight::Views, job: &str, version: u64) -> Value {
    let stats = views.stats();
    serde_json::json!({
        "job": job,
        "now_nanos": views.now_nanos(),
        "applied": stats.applied,
        "ignored": stats.ignored,
        "dropped": stats.dropped,
        "lost": stats.lost,
        "unmatched": stats.unmatched,
        "live_tasks": stats.live_tasks,
        "version": version,
    })
}

/// How a [`Dashboard`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Where to listen (default `127.0.0.1:0`: loopback, a free port).
    /// Another interface is served only when set here explicitly.
    pub bind: SocketAddr,
    /// The access token (default: 128 random bits, hex).
    pub token: Option<String>,
    /// How many requests are served at once; more are refused with 503
    /// (default 64).
    pub max_connections: usize,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            max_connections: 64,
        }
    }
}

/// A running dashboard server; dropping it stops serving.
pub struct Dashboard {
    addr: SocketAddr,
    token: String,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the server's threads share.
struct Shared {
    source: Arc<dyn Source>,
    token: String,
    stopped: AtomicBool,
    open: AtomicUsize,
    max_connections: usize,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// How often `/api/events` pushes the counters.
pub const EVENT_EVERY: Duration = Duration::from_secs(1);

impl Dashboard {
    /// Starts serving `source` as `config` says.
    ///
    /// # Errors
    ///
    /// The address cannot be bound, or no thread can be started.
    pub fn start(config: DashboardConfig, source: Arc<dyn Source>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.bind)?;
        let addr = listener.local_addr()?;
        let token = config.token.unwrap_or_else(random_token);
        let shared = Arc::new(Shared {
            source,
            token: token.clone(),
            stopped: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            max_connections: config.max_connections.max(1),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("rayrs-dashboard".into())
                .spawn(move || http::accept_loop(&listener, &shared))?
        };
        Ok(Self {
            addr,
            token,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL, token included: what to open in a browser.
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
            SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
            addr => addr.to_string(),
        };
        format!("http://{host}/?token={}", self.token)
    }

    /// The access token.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        // Wake the blocked accept with a connection of our own.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], a.port()))
            }
            SocketAddr::V6(a) if a.ip().is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
            }
            addr => addr,
        };
        let _ = std::net::TcpStream::connect_timeout(&wake, Duration::from_millis(200));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// 128 random bits from the OS, as hex; a time-and-pid hash if the OS has
/// no random source to read (never on Linux).
fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ (u128::from(std::process::id()) << 64);
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The simplest [`Source`]: one job's [`Views`](ray_insight::Views) held here, with
/// the version bumped by every [`ViewsSource::accept`] — what serves a
/// replayed event log (`rayrs insight serve`), or views a program builds
/// itself.
pub struct ViewsSource {
    job: String,
    views: std::sync::Mutex<ray_insight::Views>,
    log: Option<std::path::PathBuf>,
    version: std::sync::atomic::AtomicU64,
}

impl ViewsSource {
    /// Serves `views` as job `job`; `log`, when given, is the event log that
    /// times are replayed from.
    pub fn new(job: &str, views: ray_insight::Views, log: Option<std::path::PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            job: job.to_owned(),
            views: std::sync::Mutex::new(views),
            log,
            version: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// Applies `records` to the views; the page's live tabs receive what
    /// changed.
    pub fn accept(&self, records: &[ray_insight::Record]) {
        ray_insight::Sink::accept(&mut *self.views(), records);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The views, locked (the server waits while they are held).
    pub fn views(&self) -> std::sync::MutexGuard<'_, ray_insight::Views> {
        // A panic elsewhere while holding the views leaves them usable.
        self.views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, job: Option<&str>) -> Result<(), String> {
        match job {
            None => Ok(()),
            Some(j) if j == self.job => Ok(()),
            Some(other) => Err(format!("no job {other} here (only {})", self.job)),
        }
    }
}

impl Source for ViewsSource {
    fn jobs(&self) -> Vec<JobEntry> {
        vec![JobEntry {
            job: self.job.clone(),
            label: self.job.clone(),
            latest: true,
        }]
    }

    fn stats(&self, job: Option<&str>) -> Result<Value, String> {
        self.check(job)?;
        let version = self.version.load(Ordering::Acquire);
        Ok(stats_json(&self.views(), &self.job, version))
    }

    fn view(&self, query: &ViewQuery) -> Result<String, String> {
        self.check(query.job.as_deref())?;
        render(&self.views(), self.log.as_deref(), query)
    }
}
