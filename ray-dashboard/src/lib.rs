//! The insight dashboard of ray-rs: the five views in a browser, served
//! over HTTP by the process that holds them (an embedded runtime, a
//! cluster's head, or `rayrs insight serve` replaying an event log).
//!
//! # What this crate owns
//!
//! - The server, [`Dashboard`]: hyper's HTTP/1.1 on a tokio runtime — the
//!   caller's ([`Dashboard::start_on`], what the head does) or one small
//!   thread of its own ([`Dashboard::start`], for callers that are not
//!   async). One request per connection (`Connection: close`), a bounded
//!   request head (64 KiB) and body (16 MiB, only for a flame graph
//!   baseline POSTed by a client holding the token), a cap on open
//!   connections ([`DashboardConfig::max_connections`], more are answered
//!   503). Dropping the [`Dashboard`] stops it: it stops accepting, live
//!   event streams end, requests in flight get a moment to finish.
//! - The API:
//!   - `/` — the page (every asset is compiled into the binary: no CDN,
//!     works offline), with the access token written into it;
//!   - `/api/jobs`, `/api/stats?job=J`,
//!     `/api/view?job=J&view=V&format=F[&at=NANOS][&filter=k=v][&metric=M][&fold=F]`
//!     (the same text `rayrs insight export` writes; `fold=class` folds
//!     the flame graph's actor instances into their classes, in every
//!     format, see [`FlameFold`]),
//!     `/api/flamediff?job=J&before=FOLDED` (a differential flame graph
//!     against a baseline; or POST the baseline as the body),
//!     `/api/summary?job=J&view=V[&at=..][&filter=..][&expand=CLASS][&from=NANOS&to=NANOS][&top=N]`
//!     (the view summarized for the browser: see [`summary`]; `top=N`
//!     adds the bottleneck summary of `rayrs insight top` to the logical
//!     view's), and
//!   - `/api/events?job=J[&view=V&...]` (server-sent events every
//!     [`EVENT_EVERY`]: the counters; with a view, its summary first and
//!     then only keyed deltas of what changed, see [`summary::diff`]).
//!
//!   Every request must carry the token (`?token=T`, or `Authorization:
//!   Bearer T`); anything else is refused with 401 before it is routed,
//!   whatever its path or method. The default bind address is 127.0.0.1
//!   with a random port; another address must be asked for. The server
//!   aggregates: the browser receives summaries of the views (bounded
//!   whatever the job's size), never raw records.
//! - The page (`assets/`: vanilla HTML/CSS/JS; its `patch` mirrors
//!   [`summary::patch`]).
//! - What the server shows, as a trait: [`Source`] (jobs, counters with a
//!   version, views rendered as the exports are, replay at a time), with
//!   [`render`] and [`stats_json`], the part every source shares, and
//!   [`ViewsSource`], views held in memory.
//! - [`summary`]: each view summarized to a bounded size, and the keyed
//!   deltas of live tabs.
//!
//! # What it must not know about
//!
//! No ray-core and no runtime types (tasks, actors, nodes, the cluster):
//! ray-core implements [`Source`] for its embedded recording and for the
//! head's collector and depends on this crate, never the other way round.
//! Below it, only ray-insight (views, exports, the event log) and the HTTP
//! stack (hyper, tokio). ray-insight knows nothing of this crate: it stays
//! free of sockets and HTTP.
//!
//! A [`Source`] is called from tokio's blocking pool (`spawn_blocking`),
//! never on a worker thread, so it may lock, render or replay a log.

mod conn;
mod events;
mod query;
mod routes;
mod server;
pub mod summary;
mod views_source;

use std::path::{Path, PathBuf};

use ray_insight::export::{ExportError, ExportFormat, ViewKind};
use ray_insight::log::{read_log, LogError, Replay};
use ray_insight::views::FlameMetric;
use ray_insight::{Sink, Views};
use serde_json::Value;

pub use events::EVENT_EVERY;
pub use query::parse_filter;
pub use server::{Dashboard, DashboardConfig};
pub use summary::{SummaryError, SummaryLimits, SummaryParams};
pub use views_source::ViewsSource;

/// One job the dashboard can show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEntry {
    /// Its id as the views name it (`job-1`, or `embedded`).
    pub job: String,
    /// What the job selector shows beside the id (the driver program's name).
    pub label: String,
    /// The job shown when none is asked for.
    pub latest: bool,
}

pub use ray_insight::export::FlameFold;

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
    pub filter: Vec<(String, String)>,
    /// The flame graph's time.
    pub metric: FlameMetric,
    /// The flame graph's frames: by actor instance or by class (other
    /// views ignore it).
    pub fold: FlameFold,
    /// Summarized for the browser (JSON, whatever `format` says), narrowed
    /// as these say; `None`: the full export.
    pub summary: Option<SummaryParams>,
}

/// Why a [`Source`] cannot answer a request. Its text is one line for the
/// person looking: the dashboard sends it with a 404, or as an event's
/// `error`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The source has nothing for the job asked for: not a job it knows,
    /// or none recorded yet. The reason says which, as this source names
    /// its jobs.
    #[error("{reason}")]
    UnknownJob {
        /// What the person looking is told.
        reason: String,
    },
    /// The recording the source served has ended.
    #[error("the recording has ended")]
    Ended,
    /// A time was asked for, and no event log is kept to replay it from.
    #[error("no event log is kept here, so no time can be replayed")]
    NoLog,
    /// The event log could not be read for a replay.
    #[error("cannot read {}: {source}", path.display())]
    ReadLog {
        /// The log.
        path: PathBuf,
        /// What reading it said.
        source: LogError,
    },
    /// The view cannot be exported as asked.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The view has no summary.
    #[error(transparent)]
    Summary(#[from] SummaryError),
    /// Anything else a source of its own has to say.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// Where the dashboard's views come from: the process's recording.
///
/// Implementations answer from their live views (or replay their event log
/// for `at_nanos`); errors are one line for the person looking. The server
/// calls them on tokio's blocking pool, several at once when several
/// requests are in flight, so they may block (take a lock, render a view,
/// read a log) but should not hold a lock between calls.
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
    fn stats(&self, job: Option<&str>) -> Result<Value, SourceError>;

    /// One view as text, as `rayrs insight export` writes it.
    ///
    /// # Errors
    ///
    /// An unknown job, or a time that cannot be replayed.
    fn view(&self, query: &ViewQuery) -> Result<String, SourceError>;
}

/// Answers `query` from `views`, or, for a time, by replaying the event log
/// at `log` up to it: the common part of every [`Source`].
///
/// # Errors
///
/// A time asked for with no log, a log that cannot be read, or an export
/// the view does not have.
pub fn render(views: &Views, log: Option<&Path>, query: &ViewQuery) -> Result<String, SourceError> {
    let export = |views: &Views| {
        let snapshot = views.filter_all(&query.filter);
        match &query.summary {
            Some(params) => {
                summary::summarize(&snapshot, query.view, params, &SummaryLimits::default())
                    .map(|v| v.to_string())
                    .map_err(SourceError::from)
            }
            None => ray_insight::export::export_with(
                &snapshot,
                query.view,
                query.format,
                query.metric,
                query.fold,
            )
            .map_err(SourceError::from),
        }
    };
    match query.at_nanos {
        None => export(views),
        Some(at) => {
            let path = log.ok_or(SourceError::NoLog)?;
            let contents = read_log(path).map_err(|source| SourceError::ReadLog {
                path: path.to_owned(),
                source,
            })?;
            let mut replay = Replay::new(views.limits().clone(), Some(at));
            Sink::accept(&mut replay, &contents.records);
            export(replay.views())
        }
    }
}

/// The counters every [`Source::stats`] reports, from `views`.
pub fn stats_json(views: &Views, job: &str, version: u64) -> Value {
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
