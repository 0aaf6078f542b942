//! The command line, as clap derives it from the types below: their doc
//! comments are `rayrs --help` and each subcommand's `--help`.
//!
//! clap checks the syntax of each value; what depends on several flags (a
//! view and its format, the CPUs a node offers) is checked when the parsed
//! line becomes a [`Command`], with the same one-line errors and exit
//! status 2.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::error::ErrorKind;
use clap::{ArgGroup, Args, CommandFactory, Parser, Subcommand, ValueEnum};
use ray_core::{Quantity, ResourceSet};
use ray_insight::export::{parse_metric, ExportFormat, FlameFold, ViewKind};
use ray_insight::views::FlameMetric;

use crate::insight;
use crate::CliError;

/// Start, inspect and stop a ray-rs cluster; export the insight views of a
/// recorded job.
///
/// Every failure is one line on stderr.
#[derive(Debug, Parser)]
#[command(name = "rayrs", version, after_help = EXIT_STATUS)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// The exit statuses, under every help text.
const EXIT_STATUS: &str = "\
Exit status: 0 done, 1 failed, 2 bad command line, 3 the log is truncated or
corrupt: the output covers the records before the damage, and one
`rayrs: warning:` line on stderr says where it is.";

/// The subcommands of `rayrs`.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Start a head (`--head`) or join a node (`--address`), in the foreground
    ///
    /// The head runs the GCS, its own node and the insight dashboard, and
    /// prints the dashboard's URL (access token included; also written to
    /// D/dashboard_url, mode 0600). It writes the cluster CA to D/ca, the
    /// credentials to copy to other hosts to D/credentials, and its address
    /// to D/gcs_address. Runs until SIGTERM (`rayrs stop`), Ctrl-C, or the
    /// GCS going away.
    #[command(
        args_override_self = true,
        group(ArgGroup::new("mode").required(true).args(["head", "address"]))
    )]
    Start(StartCli),
    /// Print the nodes (resources used/total), then job and actor counts
    #[command(args_override_self = true)]
    Status(QueryCli),
    /// Print one table: nodes, jobs, actors, tasks or objects
    ///
    /// `list tasks` and `list objects` ask every worker and driver (up to
    /// 2 s each); one that does not answer is named on stderr and the
    /// others are listed.
    #[command(args_override_self = true)]
    List(ListCli),
    /// Stop what `rayrs start --dir D` started on this host
    ///
    /// Sends SIGTERM to each and waits up to 10 s for them to exit.
    #[command(args_override_self = true)]
    Stop(StopCli),
    /// Export, compare or serve the insight views of a recorded job
    #[command(subcommand)]
    Insight(InsightCli),
    /// Print a completion script for a shell
    ///
    /// For example: `rayrs completions bash > /etc/bash_completion.d/rayrs`.
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
}

/// `--dir`, shared by every command that uses the cluster directory.
#[derive(Debug, Args)]
pub struct DirCli {
    /// The cluster directory [default: $RAYRS_DIR, else /tmp/rayrs]
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,
}

impl DirCli {
    /// `--dir`, else `$RAYRS_DIR`, else `/tmp/rayrs`.
    fn resolve(self) -> PathBuf {
        self.dir
            .or_else(|| std::env::var_os("RAYRS_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/tmp/rayrs"))
    }
}

/// How `status`, `list` and `insight export` reach the GCS.
#[derive(Debug, Args)]
pub struct QueryCli {
    /// The GCS [default: the address in D/gcs_address]
    #[arg(long, value_name = "HOST:PORT", value_parser = resolve)]
    pub address: Option<SocketAddr>,
    /// The cluster's credentials directory (or a file in it) [default: D/credentials]
    #[arg(long, value_name = "DIR")]
    pub credentials: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub dir: DirCli,
    /// Bounds connecting and each request
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub timeout_ms: u64,
}

/// `rayrs start`.
#[derive(Debug, Args)]
pub struct StartCli {
    /// Start a head: the GCS, its node and the dashboard
    #[arg(long, conflicts_with = "credentials")]
    pub head: bool,
    /// Join the cluster whose GCS is at HOST:PORT
    #[arg(long, value_name = "HOST:PORT", value_parser = resolve)]
    pub address: Option<SocketAddr>,
    /// The cluster's credentials directory (or a file in it) [default: D/credentials]
    #[arg(long, value_name = "DIR")]
    pub credentials: Option<PathBuf>,
    /// The IP or host name the GCS listens on (head)
    #[arg(
        long,
        value_name = "IP",
        default_value = "127.0.0.1",
        requires = "head"
    )]
    pub host: String,
    /// The port the GCS listens on; 0 picks a free one (head)
    #[arg(long, value_name = "P", default_value_t = 6379, requires = "head")]
    pub port: u16,
    /// CPUs this node offers [default: the CPU of --resources, else every core]
    #[arg(long, value_name = "N", value_parser = quantity)]
    pub num_cpus: Option<Quantity>,
    /// GPUs this node offers [default: the GPU of --resources, else the GPUs detected]
    #[arg(long, value_name = "N", value_parser = quantity)]
    pub num_gpus: Option<Quantity>,
    /// The `memory` resource this node offers, in bytes [default: the memory of
    /// --resources, else 70 % of the memory available at start]
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<u64>,
    /// The object store size of each worker process on this node, in bytes
    /// [default: 2 GiB]
    #[arg(long, value_name = "BYTES")]
    pub object_store_memory: Option<u64>,
    /// Job binaries no running job uses are kept up to this many bytes in all,
    /// the least recently used evicted first
    #[arg(long, value_name = "BYTES", default_value_t = 2 << 30)]
    pub binary_cache_bytes: u64,
    /// The scheduling policies this node decides with, by the name they were
    /// registered under (`standard`: Ray's)
    #[arg(long, value_name = "NAME", default_value = "standard")]
    pub policies: String,
    /// Resources this node offers, as a JSON object: {"GPU": 1, "disk": 0.5}
    #[arg(long, value_name = "JSON", value_parser = parse_resources)]
    pub resources: Option<ResourceSet>,
    /// This node's labels, as a JSON object of strings: {"zone": "a"}
    #[arg(long, value_name = "JSON", value_parser = parse_labels)]
    pub labels: Option<BTreeMap<String, String>>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub dir: DirCli,
    /// A node silent this long is dead (head)
    #[arg(long, value_name = "MS", default_value_t = 10_000, requires = "head")]
    pub health_timeout_ms: u64,
    /// Bounds connecting to the GCS and each TLS handshake
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Accepted for scripts written for Ray; `rayrs start` always stays in the foreground
    #[arg(long)]
    pub block: bool,
    /// The interface the dashboard listens on; only loopback unless set (head)
    #[arg(
        long,
        value_name = "IP",
        default_value = "127.0.0.1",
        requires = "head"
    )]
    pub dashboard_host: IpAddr,
    /// The dashboard's port; 0 picks a free one (head)
    #[arg(long, value_name = "P", default_value_t = 0, requires = "head")]
    pub dashboard_port: u16,
}

/// The tables `rayrs list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Table {
    /// Nodes, alive or dead, with their resources.
    Nodes,
    /// Jobs, running or finished, with their drivers.
    Jobs,
    /// Actors with their state, class and name.
    Actors,
    /// Unfinished tasks, as their owners report them.
    Tasks,
    /// Objects, as their owners report them.
    Objects,
}

/// How `rayrs list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns, one row a line.
    Table,
    /// One JSON array of objects.
    Json,
}

/// `rayrs list`.
#[derive(Debug, Args)]
pub struct ListCli {
    /// What to list
    #[arg(value_enum)]
    pub table: Table,
    /// How to print it
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub query: QueryCli,
}

/// `rayrs stop`.
#[derive(Debug, Args)]
pub struct StopCli {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub dir: DirCli,
}

/// `rayrs insight …`.
#[derive(Debug, Subcommand)]
pub enum InsightCli {
    /// Write one view of a job, from an event log or the running cluster's head
    ///
    /// With --log, replays the event log (whole, or as it stood --at SECONDS
    /// after the log's epoch). Without it, asks the running cluster's head
    /// for job N (default: the latest job that recorded; --at SECONDS after
    /// the job started replays the head's log of it). Formats per view (the
    /// first is the default): logical json|dot, physical json, stack
    /// text|json, flame folded|svg, gantt chrome|json (chrome and json are
    /// the same Chrome trace).
    #[command(args_override_self = true)]
    Export(ExportCli),
    /// Compare two flame graphs: folded files or event logs
    #[command(args_override_self = true)]
    Diff(DiffCli),
    /// The bottlenecks of a recorded run: the actor instances and functions
    /// with the most self time, the longest waits, the largest data edges,
    /// and deadlocks
    #[command(args_override_self = true)]
    Top(TopCli),
    /// Replay an event log and serve its dashboard until Ctrl-C
    ///
    /// The time slider replays any moment of the log.
    #[command(args_override_self = true)]
    Serve(ServeCli),
}

/// `rayrs insight export`.
#[derive(Debug, Args)]
pub struct ExportCli {
    /// The event log to read, instead of asking a live cluster
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["job", "address", "credentials", "dir", "timeout_ms"]
    )]
    pub log: Option<PathBuf>,
    /// The view to write
    #[arg(long, value_name = "VIEW", value_parser = view_parser())]
    pub view: ViewKind,
    /// The format to write it in [default: the view's first]
    #[arg(long, value_name = "F", value_parser = format_parser(&ExportFormat::ALL))]
    pub format: Option<ExportFormat>,
    /// Replay only what happened up to this many seconds after the start
    #[arg(long, value_name = "SECONDS", value_parser = seconds_as_nanos, allow_negative_numbers = true)]
    pub at: Option<u64>,
    /// Keep only the tasks with this context label (repeat for several:
    /// a task must have them all)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub filter: Vec<(String, String)>,
    /// The flame graph's time (flame only) [default: self]
    #[arg(long, value_name = "METRIC", value_parser = metric_parser())]
    pub metric: Option<FlameMetric>,
    /// The flame graph's frames: one per actor instance, or its instances
    /// folded into their class (flame only) [default: instance]
    #[arg(long, value_name = "FOLD", value_parser = fold_parser())]
    pub fold: Option<FlameFold>,
    /// Write to FILE instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The job to ask the head for, as `rayrs list jobs` names it (`job-1a`,
    /// or just `1a`: ids are hexadecimal) [default: the latest that
    /// recorded]
    #[arg(long, value_name = "JOB", value_parser = job_parser)]
    pub job: Option<u32>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub query: QueryCli,
}

/// `rayrs insight diff`.
#[derive(Debug, Args)]
pub struct DiffCli {
    /// The baseline: a folded file or an event log
    #[arg(long, value_name = "A")]
    pub before: PathBuf,
    /// The run to compare: a folded file or an event log
    #[arg(long, value_name = "B")]
    pub after: PathBuf,
    /// The format to write the difference in
    #[arg(
        long,
        value_name = "F",
        value_parser = format_parser(&[ExportFormat::Folded, ExportFormat::Svg]),
        default_value = "folded"
    )]
    pub format: ExportFormat,
    /// The time an event log is folded by [default: self]
    #[arg(long, value_name = "METRIC", value_parser = metric_parser())]
    pub metric: Option<FlameMetric>,
    /// Write to FILE instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `rayrs insight top`.
#[derive(Debug, Args)]
pub struct TopCli {
    /// The event log to read
    #[arg(long, value_name = "FILE")]
    pub log: PathBuf,
    /// Keep only the tasks with this context label (repeat for several)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub filter: Vec<(String, String)>,
    /// Rows of each kind
    #[arg(short = 'n', long, value_name = "N", default_value_t = 5)]
    pub rows: usize,
}

/// `rayrs insight serve`.
#[derive(Debug, Args)]
pub struct ServeCli {
    /// The event log to serve
    #[arg(long, value_name = "FILE")]
    pub log: PathBuf,
    /// The interface the dashboard listens on; only loopback unless set
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub dashboard_host: IpAddr,
    /// The dashboard's port; 0 picks a free one
    #[arg(long, value_name = "P", default_value_t = 0)]
    pub dashboard_port: u16,
}

/// A parsed and checked command line.
#[derive(Debug)]
pub enum Command {
    /// `rayrs start --head`.
    Head(StartArgs),
    /// `rayrs start --address`.
    Join(StartArgs, SocketAddr),
    /// `rayrs status`.
    Status(QueryArgs),
    /// `rayrs list WHAT`.
    List(QueryArgs, Table, Format),
    /// `rayrs stop`.
    Stop {
        /// The cluster directory.
        dir: PathBuf,
    },
    /// `rayrs insight export`.
    InsightExport(insight::ExportArgs),
    /// `rayrs insight diff`.
    InsightDiff(insight::DiffArgs),
    /// `rayrs insight top`.
    InsightTop(insight::TopArgs),
    /// `rayrs insight serve`: a log's dashboard.
    InsightServe {
        /// The event log.
        log: PathBuf,
        /// Where to serve (default 127.0.0.1:0).
        dashboard: SocketAddr,
    },
    /// `rayrs completions SHELL`.
    Completions(clap_complete::Shell),
}

/// What `rayrs start` was asked for.
#[derive(Debug)]
pub struct StartArgs {
    /// The cluster directory.
    pub dir: PathBuf,
    /// The GCS's host (head).
    pub host: String,
    /// The GCS's port (head).
    pub port: u16,
    /// What the node offers, CPUs included.
    pub resources: ResourceSet,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
    /// `--credentials` (join).
    pub credentials: Option<PathBuf>,
    /// A node silent this long is dead (head).
    pub health_timeout: Duration,
    /// Bounds connecting and each handshake.
    pub timeout: Duration,
    /// Where the head serves the insight dashboard (default 127.0.0.1:0).
    pub dashboard: SocketAddr,
    /// What the node's workers and binary cache may use.
    pub limits: ray_core::cluster::NodeLimits,
    /// Makes the node's scheduling policies (`--policies`).
    pub policies: ray_core::cluster::PolicyFactory,
}

/// How `status` and `list` reach the GCS.
#[derive(Debug)]
pub struct QueryArgs {
    /// The cluster directory.
    pub dir: PathBuf,
    /// `--address`, else the one in the cluster directory.
    pub address: Option<SocketAddr>,
    /// `--credentials`, else the cluster directory's.
    pub credentials: Option<PathBuf>,
    /// Bounds connecting and each request.
    pub timeout: Duration,
}

impl Cli {
    /// The checked command: what clap cannot check alone.
    ///
    /// # Errors
    ///
    /// A usage error (exit status 2) for values that do not fit together.
    pub fn into_command(self) -> Result<Command, CliError> {
        Ok(match self.command {
            CliCommand::Start(start) => start.command()?,
            CliCommand::Status(query) => Command::Status(query.into()),
            CliCommand::List(list) => Command::List(list.query.into(), list.table, list.format),
            CliCommand::Stop(stop) => Command::Stop {
                dir: stop.dir.resolve(),
            },
            CliCommand::Insight(InsightCli::Export(export)) => export.command()?,
            CliCommand::Insight(InsightCli::Diff(diff)) => {
                Command::InsightDiff(insight::DiffArgs {
                    before: diff.before,
                    after: diff.after,
                    format: diff.format,
                    metric: diff.metric.unwrap_or(FlameMetric::SelfTime),
                    out: diff.out,
                })
            }
            CliCommand::Insight(InsightCli::Top(top)) => Command::InsightTop(insight::TopArgs {
                log: top.log,
                filter: top.filter,
                rows: top.rows,
            }),
            CliCommand::Insight(InsightCli::Serve(serve)) => Command::InsightServe {
                log: serve.log,
                dashboard: SocketAddr::new(serve.dashboard_host, serve.dashboard_port),
            },
            CliCommand::Completions { shell } => Command::Completions(shell),
        })
    }
}

impl From<QueryCli> for QueryArgs {
    fn from(query: QueryCli) -> Self {
        QueryArgs {
            dir: query.dir.resolve(),
            address: query.address,
            credentials: query.credentials,
            timeout: Duration::from_millis(query.timeout_ms.max(1)),
        }
    }
}

impl StartCli {
    fn command(self) -> Result<Command, CliError> {
        let policies = ray_core::cluster::policy_set(&self.policies).ok_or_else(|| {
            CliError::usage(format!(
                "--policies: no policy set named {:?} (this rayrs has {})",
                self.policies,
                ray_core::cluster::policy_set_names().join(", ")
            ))
        })?;
        let mut resources = self.resources.unwrap_or_default();
        let machine = ray_core::machine::detect();
        // A flag wins, then --resources, then what the machine has.
        let mut pick = |name: &str, flag: Option<Quantity>, detected: u64| {
            let amount = match flag {
                Some(n) => n,
                None if resources.get(name).is_zero() => Quantity::from_units(detected),
                None => resources.get(name),
            };
            resources.set(name, amount);
        };
        pick("CPU", self.num_cpus, machine.cpus as u64);
        pick("GPU", self.num_gpus, machine.gpus.len() as u64);
        pick(
            "memory",
            self.memory.map(Quantity::from_units),
            machine.default_memory_bytes(),
        );
        let args = StartArgs {
            dir: self.dir.resolve(),
            host: self.host,
            port: self.port,
            resources,
            labels: {
                let mut labels = self.labels.unwrap_or_default();
                if let Some(model) = machine.gpu_model() {
                    labels
                        .entry("accelerator_type".into())
                        .or_insert_with(|| model.to_owned());
                }
                labels
            },
            credentials: self.credentials,
            health_timeout: Duration::from_millis(self.health_timeout_ms.max(1)),
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            dashboard: SocketAddr::new(self.dashboard_host, self.dashboard_port),
            limits: ray_core::cluster::NodeLimits {
                object_store_bytes: self.object_store_memory,
                binary_cache_bytes: self.binary_cache_bytes,
            },
            policies,
        };
        match self.address {
            // clap's group: exactly one of --head and --address.
            Some(addr) if !self.head => Ok(Command::Join(args, addr)),
            _ => Ok(Command::Head(args)),
        }
    }
}

impl ExportCli {
    fn command(self) -> Result<Command, CliError> {
        let usage = |e: ray_insight::export::ExportError| CliError::usage(e.to_string());
        let format = match self.format {
            Some(format) => self.view.check(format).map_err(usage)?,
            None => self.view.default_format(),
        };
        if self.metric.is_some() && self.view != ViewKind::Flame {
            return Err(CliError::usage(
                "--metric applies to --view flame only".into(),
            ));
        }
        if self.fold.is_some() && self.view != ViewKind::Flame {
            return Err(CliError::usage(
                "--fold applies to --view flame only".into(),
            ));
        }
        let source = match self.log {
            Some(log) => insight::Source::Log(log),
            None => insight::Source::Cluster {
                query: self.query.into(),
                job: self.job,
            },
        };
        Ok(Command::InsightExport(insight::ExportArgs {
            source,
            view: self.view,
            format,
            at_nanos: self.at,
            filter: self.filter,
            metric: self.metric.unwrap_or(FlameMetric::SelfTime),
            fold: self.fold.unwrap_or_default(),
            out: self.out,
        }))
    }
}

/// Why a value on the command line does not parse: clap prints it after
/// the flag it was given to.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Not `HOST:PORT`, or a host that resolves to nothing.
    #[error("must be HOST:PORT, got `{address}`")]
    Address {
        /// What was given.
        address: String,
        /// The resolver's error, when it failed (`None`: no address).
        source: Option<std::io::Error>,
    },
    /// Not a non-negative number.
    #[error("must be a non-negative number, got `{0}`")]
    Quantity(String),
    /// Not a JSON object.
    #[error("must be a JSON object, got `{0}`")]
    JsonObject(String),
    /// A resource whose amount is not a non-negative number.
    #[error("`{name}` must be a non-negative number, got {value}")]
    Resource {
        /// The resource.
        name: String,
        /// Its amount as given.
        value: serde_json::Value,
    },
    /// A label whose value is not a string.
    #[error("`{key}` must be a string, got {value}")]
    Label {
        /// The label.
        key: String,
        /// Its value as given.
        value: serde_json::Value,
    },
    /// Not a number of seconds `>= 0`.
    #[error("must be a number of seconds >= 0, got `{0}`")]
    Seconds(String),
    /// Not `KEY=VALUE` with a non-empty key.
    #[error("must be KEY=VALUE, got `{0}`")]
    KeyValue(String),
}

/// `HOST:PORT` as a socket address.
///
/// # Errors
///
/// When it names no address.
pub fn resolve(address: &str) -> Result<SocketAddr, ArgError> {
    let bad = |source| ArgError::Address {
        address: address.to_owned(),
        source,
    };
    address
        .to_socket_addrs()
        .map_err(|e| bad(Some(e)))?
        .next()
        .ok_or_else(|| bad(None))
}

/// A non-negative number as a [`Quantity`].
fn quantity(text: &str) -> Result<Quantity, ArgError> {
    text.parse::<f64>()
        .ok()
        .and_then(|n| Quantity::from_f64(n).ok())
        .ok_or_else(|| ArgError::Quantity(text.to_owned()))
}

/// A JSON object.
fn json_object(json: &str) -> Result<serde_json::Map<String, serde_json::Value>, ArgError> {
    match serde_json::from_str(json) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(ArgError::JsonObject(json.to_owned())),
    }
}

/// `{"CPU": 2, "GPU": 1, "disk": 0.5}` as a resource set.
fn parse_resources(json: &str) -> Result<ResourceSet, ArgError> {
    let mut set = ResourceSet::new();
    for (name, value) in json_object(json)? {
        let Some(q) = value.as_f64().and_then(|x| Quantity::from_f64(x).ok()) else {
            return Err(ArgError::Resource { name, value });
        };
        set.set(&name, q);
    }
    Ok(set)
}

/// `{"zone": "a"}` as labels.
fn parse_labels(json: &str) -> Result<BTreeMap<String, String>, ArgError> {
    json_object(json)?
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => Ok((key, s)),
            value => Err(ArgError::Label { key, value }),
        })
        .collect()
}

/// Seconds `>= 0` as nanoseconds.
fn seconds_as_nanos(text: &str) -> Result<u64, ArgError> {
    match text.parse::<f64>() {
        // Saturates at u64::MAX nanoseconds (585 years).
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok((secs * 1e9).round() as u64),
        _ => Err(ArgError::Seconds(text.to_owned())),
    }
}

/// `KEY=VALUE` with a non-empty key.
fn key_value(text: &str) -> Result<(String, String), ArgError> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(ArgError::KeyValue(text.to_owned())),
    }
}

/// The view names, completed and listed in `--help`.
fn view_parser() -> impl TypedValueParser<Value = ViewKind> {
    PossibleValuesParser::new(ViewKind::ALL.map(ViewKind::as_str))
        .try_map(|name| name.parse::<ViewKind>())
}

/// The names of `formats`.
fn format_parser(formats: &[ExportFormat]) -> impl TypedValueParser<Value = ExportFormat> {
    PossibleValuesParser::new(formats.iter().map(|f| f.as_str()))
        .try_map(|name| name.parse::<ExportFormat>())
}

/// The flame graph's folds.
/// A job id as the CLI prints it: `job-1a`, or `1a` (hexadecimal).
fn job_parser(text: &str) -> Result<u32, String> {
    let hex = text.strip_prefix("job-").unwrap_or(text);
    u32::from_str_radix(hex, 16).map_err(|_| {
        format!("{text:?} is not a job id: give it as `rayrs list jobs` prints it (job-1a, or 1a)")
    })
}

fn fold_parser() -> impl TypedValueParser<Value = FlameFold> {
    PossibleValuesParser::new([FlameFold::Instance, FlameFold::Class].map(FlameFold::as_str))
        .try_map(|name| FlameFold::from_name(&name).ok_or_else(|| format!("no fold {name:?}")))
}

/// The flame graph metrics.
fn metric_parser() -> impl TypedValueParser<Value = FlameMetric> {
    PossibleValuesParser::new(
        [
            FlameMetric::SelfTime,
            FlameMetric::Running,
            FlameMetric::Waiting,
        ]
        .map(FlameMetric::as_str),
    )
    .try_map(|name| parse_metric(&name))
}

/// A clap error as one line: its message, the lines that detail it, and
/// which `--help` to read.
pub fn one_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let command = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .map_or_else(|| "rayrs".to_owned(), command_path);
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
    ) {
        let choices = subcommands_of(&command);
        let of = if command == "rayrs" {
            String::new()
        } else {
            format!(" for `{command}`")
        };
        return format!("no command given{of}: choose {choices} (see {command} --help)");
    }
    let mut message = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            continue;
        }
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if !message.is_empty() {
            message.push_str(if line.starts_with("tip:") { "; " } else { " " });
        }
        message.push_str(line);
    }
    format!("{message} (see {command} --help)")
}

/// `rayrs insight` of `rayrs insight export [OPTIONS] --view <VIEW>`.
fn command_path(usage: &str) -> String {
    usage
        .split_whitespace()
        .take_while(|w| !w.starts_with(['[', '<', '-']))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The subcommands of `path` (`rayrs insight`), as `a, b or c`.
fn subcommands_of(path: &str) -> String {
    let mut command = Cli::command();
    for name in path.split_whitespace().skip(1) {
        match command.find_subcommand(name) {
            Some(sub) => command = sub.clone(),
            None => break,
        }
    }
    let names: Vec<&str> = command
        .get_subcommands()
        .map(clap::Command::get_name)
        .filter(|n| *n != "help")
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "a command".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::job_parser;

    #[test]
    fn a_job_is_given_as_the_cli_prints_it() {
        // `rayrs list jobs` prints ids in hexadecimal: `job-12` is 18.
        assert_eq!(job_parser("job-12"), Ok(18));
        assert_eq!(job_parser("12"), Ok(18));
        assert_eq!(job_parser("job-1a"), Ok(26));
        let bad = job_parser("job-xyz").unwrap_err();
        assert!(bad.contains("not a job id"), "{bad}");
        assert!(job_parser("").is_err());
    }
}
