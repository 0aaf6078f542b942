//! `rayrs insight`: the insight views of a recorded job.
//!
//! `rayrs insight export` streams a job's records from a source into a
//! [`Replay`] (all of them, or those up to `--at`), optionally filters the
//! views by a context label, and writes one view in one format.
//! `rayrs insight diff` compares the flame graphs of two runs, each a folded
//! file or an event log.
//!
//! A damaged log (truncated or corrupt part-way) still gives the output of the
//! records before the damage: it is written, then the command fails with one
//! `warning:` line and exit status [`DAMAGED_LOG`].

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use ray_insight::export::{export_with, ExportFormat, FlameFold, ViewKind};
use ray_insight::log::{LogError, LogReader, Replay, MAGIC};
use ray_insight::views::{diff_folded, diff_svg, parse_folded, FlameMetric};
use ray_insight::{Limits, Sink};
use ray_proto::wire::InsightExport;

use crate::args::QueryArgs;
use crate::query::connect;
use crate::CliError;

/// The exit status when a log was damaged and only its readable prefix was used.
pub const DAMAGED_LOG: u8 = 3;

/// Where a job's records come from.
#[derive(Debug)]
pub enum Source {
    /// An event log file (`--log FILE`).
    Log(PathBuf),
    /// The head of a running cluster, which builds the views of job `job`
    /// (`None`: the latest that recorded) from what its processes shipped.
    Cluster { query: QueryArgs, job: Option<u32> },
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Log(path) => path.display().to_string(),
            Source::Cluster { job: Some(job), .. } => format!("job-{job:x} on the cluster"),
            Source::Cluster { job: None, .. } => "the cluster's latest job".into(),
        }
    }
}

/// What `rayrs insight export` was asked for.
#[derive(Debug)]
pub struct ExportArgs {
    pub source: Source,
    pub view: ViewKind,
    pub format: ExportFormat,
    /// Replay only the records at or before this time (ns since the log's epoch).
    pub at_nanos: Option<u64>,
    /// Keep only tasks labelled `key = value`.
    pub filter: Vec<(String, String)>,
    pub metric: FlameMetric,
    /// How the flame graph names actor calls (by instance, or by class).
    pub fold: FlameFold,
    pub out: Option<PathBuf>,
}

/// What `rayrs insight diff` was asked for.
#[derive(Debug)]
pub struct DiffArgs {
    pub before: PathBuf,
    pub after: PathBuf,
    /// [`ExportFormat::Folded`] or [`ExportFormat::Svg`].
    pub format: ExportFormat,
    /// The metric a log is folded by (folded files already chose theirs).
    pub metric: FlameMetric,
    pub out: Option<PathBuf>,
}

/// What `rayrs insight top` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopArgs {
    /// The event log.
    pub log: PathBuf,
    /// Labels a task must all have.
    pub filter: Vec<(String, String)>,
    /// Rows of each kind.
    pub rows: usize,
}

/// `rayrs insight top`: the bottleneck summary of a recorded run.
pub fn top(args: TopArgs) -> Result<(), CliError> {
    let mut replay = Replay::new(Limits::default(), None);
    let damage = records_from_log(&args.log, &mut replay)?;
    let views = replay.into_views();
    let text = views.filter_all(&args.filter).top(args.rows).to_text();
    write_out(None, &text)?;
    match damage {
        Some(damage) => Err(damaged(&args.log.display().to_string(), &damage)),
        None => Ok(()),
    }
}

/// `rayrs insight export`.
pub fn export(args: ExportArgs) -> Result<(), CliError> {
    let path = match &args.source {
        Source::Log(path) => path,
        Source::Cluster { query, job } => {
            let text = export_from_head(&args, query, *job)?;
            return write_out(args.out.as_deref(), &text);
        }
    };
    let mut replay = Replay::new(Limits::default(), args.at_nanos);
    let damage = records_from_log(path, &mut replay)?;
    let views = replay.into_views();
    let snapshot = views.filter_all(&args.filter);
    let text = export_with(&snapshot, args.view, args.format, args.metric, args.fold)
        .map_err(|e| CliError::failed(format!("{}: {e}", args.source.name())))?;
    write_out(args.out.as_deref(), &text)?;
    match damage {
        Some(damage) => Err(damaged(&args.source.name(), &damage)),
        None => Ok(()),
    }
}

/// Asks the head for the view: it holds the job's views and log.
fn export_from_head(
    args: &ExportArgs,
    query: &QueryArgs,
    job: Option<u32>,
) -> Result<String, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let (_endpoint, client) = connect(query).await?;
        client
            .insight_export(InsightExport {
                job: job.map(ray_core::JobId),
                view: args.view.as_str().to_owned(),
                format: args.format.as_str().to_owned(),
                at_nanos: args.at_nanos,
                filter: (!args.filter.is_empty()).then(|| {
                    let pairs: Vec<String> = args
                        .filter
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    pairs.join(",")
                }),
                metric: Some(args.metric.as_str().to_owned()),
                fold: Some(args.fold.as_str().to_owned()),
            })
            .await
            .map_err(|e| CliError::failed(format!("{}: {e}", args.source.name())))
    })
}

/// `rayrs insight diff`.
pub fn diff(args: DiffArgs) -> Result<(), CliError> {
    let (before, before_damage) = folded_of(&args.before, args.metric)?;
    let (after, after_damage) = folded_of(&args.after, args.metric)?;
    let text = if args.format == ExportFormat::Svg {
        diff_svg(&before, &after).map_err(CliError::failed)?
    } else {
        diff_folded(&before, &after)
    };
    write_out(args.out.as_deref(), &text)?;
    let warnings: Vec<String> = [(&args.before, before_damage), (&args.after, after_damage)]
        .into_iter()
        .filter_map(|(path, damage)| Some(damage_text(&path.display().to_string(), &damage?)))
        .collect();
    if warnings.is_empty() {
        Ok(())
    } else {
        Err(CliError {
            message: format!("warning: {}", warnings.join("; ")),
            code: DAMAGED_LOG,
        })
    }
}

/// `rayrs insight serve`: replays `log` whole and serves its dashboard on
/// `bind` until SIGTERM or Ctrl-C; times are replayed from the log.
pub fn serve(log: &Path, bind: std::net::SocketAddr) -> Result<(), CliError> {
    let mut replay = Replay::new(Limits::default(), None);
    let damage = records_from_log(log, &mut replay)?;
    let job = log
        .file_stem()
        .map_or_else(|| "log".to_owned(), |s| s.to_string_lossy().into_owned());
    let source =
        ray_dashboard::ViewsSource::new(&job, replay.into_views(), Some(log.to_path_buf()));
    let dashboard = ray_dashboard::Dashboard::start(
        ray_dashboard::DashboardConfig {
            bind,
            ..Default::default()
        },
        source,
    )
    .map_err(|e| CliError::failed(format!("cannot serve the dashboard on {bind}: {e}")))?;
    if let Some(damage) = &damage {
        eprintln!(
            "rayrs: warning: {}",
            damage_text(&log.display().to_string(), damage)
        );
    }
    crate::say!("rayrs: serving {} (Ctrl-C stops)", log.display());
    crate::say!("  dashboard: {}", dashboard.url());
    let _ = std::io::stdout().flush();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| CliError::failed(format!("cannot watch for SIGTERM: {e}")))?;
        tokio::select! {
            _ = term.recv() => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })?;
    drop(dashboard);
    Ok(())
}

/// Streams an event log's records into `sink` (a frame at a time: the log is
/// never held whole in memory).
fn records_from_log(path: &Path, sink: &mut dyn Sink) -> Result<Option<LogError>, CliError> {
    let failed = |e: LogError| CliError::failed(format!("{}: {e}", path.display()));
    let file = File::open(path)
        .map_err(|e| CliError::failed(format!("cannot open {}: {e}", path.display())))?;
    let mut reader = match LogReader::new(BufReader::new(file)) {
        Ok(reader) => reader,
        // A log cut short inside its header (a program killed as it began
        // writing): damaged like any truncated log, with nothing before
        // the damage.
        Err(e) if e.is_damage() => return Ok(Some(e)),
        Err(e) => return Err(failed(e)),
    };
    reader.read_into(sink).map_err(failed)
}

/// The flame graph of a folded file or an event log, as folded stacks.
fn folded_of(path: &Path, metric: FlameMetric) -> Result<(String, Option<LogError>), CliError> {
    let cannot_read =
        |e: std::io::Error| CliError::failed(format!("cannot read {}: {e}", path.display()));
    let mut head = Vec::with_capacity(MAGIC.len());
    File::open(path)
        .and_then(|f| f.take(MAGIC.len() as u64).read_to_end(&mut head))
        .map_err(cannot_read)?;
    if head == MAGIC {
        let mut replay = Replay::new(Limits::default(), None);
        let damage = records_from_log(path, &mut replay)?;
        let folded = replay.into_views().snapshot().flame().folded(metric);
        return Ok((folded, damage));
    }
    let text = std::fs::read(path).map_err(cannot_read)?;
    let text = String::from_utf8(text).map_err(|_| {
        CliError::failed(format!(
            "{}: neither an insight log nor folded stacks (not UTF-8 text)",
            path.display()
        ))
    })?;
    if !text.trim().is_empty() && parse_folded(&text).is_empty() {
        return Err(CliError::failed(format!(
            "{}: neither an insight log nor folded stacks (no `path count` line)",
            path.display()
        )));
    }
    Ok((text, None))
}

/// Writes `text` to `out`, or to stdout.
fn write_out(out: Option<&Path>, text: &str) -> Result<(), CliError> {
    match out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display()))),
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => Ok(()),
                // The reader went away (`| head`): done, as Unix tools are.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => Err(CliError::failed(format!("cannot write to stdout: {e}"))),
            }
        }
    }
}

fn damage_text(source: &str, damage: &LogError) -> String {
    format!("{source}: {damage}; the output covers the records before it")
}

/// The warning for a damaged log whose readable prefix was exported.
fn damaged(source: &str, damage: &LogError) -> CliError {
    CliError {
        message: format!("warning: {}", damage_text(source, damage)),
        code: DAMAGED_LOG,
    }
}
