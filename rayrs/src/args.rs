//! Command-line parsing, by hand: a handful of subcommands and flags.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ray_core::{Quantity, ResourceSet};

use ray_insight::export::{parse_metric, ExportFormat, ViewKind};

use crate::insight;
use crate::CliError;

/// The usage text `rayrs --help` prints.
pub const USAGE: &str = "\
usage:
  rayrs start --head [--host IP] [--port P] [--num-cpus N] [--resources JSON]
                     [--labels JSON] [--dir D] [--health-timeout-ms MS] [--block]
                     [--dashboard-host IP] [--dashboard-port P]
  rayrs start --address HOST:PORT [--credentials DIR] [--num-cpus N]
                     [--resources JSON] [--labels JSON] [--dir D] [--block]
  rayrs status [--address HOST:PORT] [--credentials DIR] [--dir D]
  rayrs list nodes|jobs|actors|tasks|objects [--format table|json]
                     [--address HOST:PORT] [--credentials DIR] [--dir D]
  rayrs stop [--dir D]
  rayrs insight export --view logical|physical|stack|flame|gantt
                     (--log FILE | [--job N] [--address HOST:PORT]
                      [--credentials DIR] [--dir D])
                     [--format F] [--at SECONDS] [--filter KEY=VALUE]
                     [--metric self|running|waiting] [--out FILE]
  rayrs insight diff --before A --after B [--format folded|svg]
                     [--metric self|running|waiting] [--out FILE]
  rayrs insight serve --log FILE [--dashboard-host IP] [--dashboard-port P]

The head serves the insight dashboard on 127.0.0.1 (a free port unless
--dashboard-port says) and prints its URL, access token included; another
interface only with --dashboard-host.
D defaults to $RAYRS_DIR, else /tmp/rayrs. The head writes the cluster CA to
D/ca, the credentials to copy to other hosts to D/credentials, and its address
to D/gcs_address; status and list read those unless told otherwise.
--timeout-ms MS bounds connecting and each request (default 5000).
list tasks and list objects ask every worker and driver (up to 2 s each);
one that does not answer is named on stderr and the others are listed.

insight export replays an event log (whole, or as it stood --at SECONDS after
the log's epoch), or without --log asks the running cluster's head for job N
(default: the latest job that recorded; --at SECONDS after the job started
replays the head's log of it), and writes one view to --out FILE or stdout, as: logical
json|dot, physical json, stack text|json, flame folded|svg, gantt chrome|json
(the first is the default; chrome and json are the same Chrome trace).
--filter keeps the tasks with that context label; --metric picks the flame
graph's time (default self). insight diff compares two flame graphs; A and B
are folded files or event logs (folded by --metric). insight serve replays
an event log and serves its dashboard (the time slider replays any moment of
it) until Ctrl-C.

Exit status: 0 done, 1 failed, 2 bad command line, 3 the log is truncated or
corrupt: the output covers the records before the damage, and one
`rayrs: warning:` line on stderr says where it is.";

/// A parsed command line.
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
    Stop { dir: PathBuf },
    /// `rayrs insight export`.
    InsightExport(insight::ExportArgs),
    /// `rayrs insight diff`.
    InsightDiff(insight::DiffArgs),
    /// `rayrs insight serve`: a log's dashboard.
    InsightServe {
        /// The event log.
        log: PathBuf,
        /// Where to serve (default 127.0.0.1:0).
        dashboard: SocketAddr,
    },
    /// `rayrs --help`.
    Help,
}

/// What `rayrs start` was asked for.
#[derive(Debug)]
pub struct StartArgs {
    pub dir: PathBuf,
    pub host: String,
    pub port: u16,
    pub resources: ResourceSet,
    pub labels: BTreeMap<String, String>,
    pub credentials: Option<PathBuf>,
    pub health_timeout: Duration,
    pub timeout: Duration,
    /// Where the head serves the insight dashboard (default 127.0.0.1:0).
    pub dashboard: SocketAddr,
}

/// How `status` and `list` reach the GCS.
#[derive(Debug)]
pub struct QueryArgs {
    pub dir: PathBuf,
    pub address: Option<SocketAddr>,
    pub credentials: Option<PathBuf>,
    pub timeout: Duration,
}

/// The table `rayrs list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Nodes,
    Jobs,
    Actors,
    /// Unfinished tasks, as their owners report them.
    Tasks,
    /// Objects, as their owners report them.
    Objects,
}

/// How `rayrs list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

/// Flags as `--name value` pairs (and bare `--name` switches), in order.
struct Flags {
    command: &'static str,
    pairs: Vec<(String, Option<String>)>,
}

/// Flags that take no value.
const SWITCHES: &[&str] = &["--head", "--block"];

impl Flags {
    /// Splits `args` into flags, failing on any flag not in `known`.
    fn parse(command: &'static str, args: &[String], known: &[&str]) -> Result<Self, CliError> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with("--") {
                return Err(CliError::usage(format!(
                    "unexpected argument `{arg}` for `rayrs {command}`"
                )));
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (arg.clone(), None),
            };
            if !known.contains(&name.as_str()) {
                return Err(unknown_flag(&name, command));
            }
            if SWITCHES.contains(&name.as_str()) {
                pairs.push((name, None));
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| CliError::usage(format!("{name} needs a value")))?,
            };
            pairs.push((name, Some(value)));
        }
        Ok(Self { command, pairs })
    }

    /// Fails on any flag not in `allowed`.
    fn only(&self, allowed: &[&str]) -> Result<(), CliError> {
        match self
            .pairs
            .iter()
            .find(|(n, _)| !allowed.contains(&n.as_str()))
        {
            Some((name, _)) => Err(unknown_flag(name, self.command)),
            None => Ok(()),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(n, _)| n == name)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn parsed<T: std::str::FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, CliError> {
        self.get(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| CliError::usage(format!("{name} must be {what}, got `{v}`")))
            })
            .transpose()
    }

    fn dir(&self) -> PathBuf {
        self.get("--dir")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("RAYRS_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/tmp/rayrs"))
    }

    fn timeout(&self) -> Result<Duration, CliError> {
        let ms = self
            .parsed::<u64>("--timeout-ms", "a number of milliseconds")?
            .unwrap_or(5_000);
        Ok(Duration::from_millis(ms.max(1)))
    }

    fn address(&self) -> Result<Option<SocketAddr>, CliError> {
        self.get("--address").map(resolve).transpose()
    }
}

fn unknown_flag(name: &str, command: &str) -> CliError {
    CliError::usage(format!(
        "unknown flag {name} for `rayrs {command}` (see rayrs --help)"
    ))
}

/// `HOST:PORT` as a socket address.
pub fn resolve(address: &str) -> Result<SocketAddr, CliError> {
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| CliError::usage(format!("--address must be HOST:PORT, got `{address}`")))
}

/// What `rayrs list` lists, for its error messages.
const LISTABLE: &str = "nodes, jobs, actors, tasks or objects";

const QUERY_FLAGS: &[&str] = &["--address", "--credentials", "--dir", "--timeout-ms"];

const JOIN_FLAGS: &[&str] = &[
    "--address",
    "--credentials",
    "--num-cpus",
    "--resources",
    "--labels",
    "--dir",
    "--block",
    "--timeout-ms",
];

const HEAD_ONLY_FLAGS: &[&str] = &[
    "--head",
    "--host",
    "--port",
    "--health-timeout-ms",
    "--dashboard-host",
    "--dashboard-port",
];

/// Parses `args` (without the program name).
pub fn parse(args: &[String]) -> Result<Command, CliError> {
    let Some(command) = args.first() else {
        return Err(CliError::usage(
            "no command given (see rayrs --help)".into(),
        ));
    };
    let rest = &args[1..];
    match command.as_str() {
        "--help" | "-h" | "help" => Ok(Command::Help),
        "start" => {
            let known = [JOIN_FLAGS, HEAD_ONLY_FLAGS].concat();
            parse_start(&Flags::parse("start", rest, &known)?)
        }
        "status" => {
            let flags = Flags::parse("status", rest, QUERY_FLAGS)?;
            Ok(Command::Status(query(&flags)?))
        }
        "list" => {
            let table = match rest.first().map(String::as_str) {
                Some("nodes") => Table::Nodes,
                Some("jobs") => Table::Jobs,
                Some("actors") => Table::Actors,
                Some("tasks") => Table::Tasks,
                Some("objects") => Table::Objects,
                Some(other) => {
                    return Err(CliError::usage(format!(
                        "cannot list `{other}`: choose {LISTABLE}"
                    )))
                }
                None => return Err(CliError::usage(format!("list what? {LISTABLE}"))),
            };
            let known = [QUERY_FLAGS, &["--format"]].concat();
            let flags = Flags::parse("list", &rest[1..], &known)?;
            let format = match flags.get("--format") {
                None | Some("table") => Format::Table,
                Some("json") => Format::Json,
                Some(other) => {
                    return Err(CliError::usage(format!(
                        "--format must be table or json, got `{other}`"
                    )))
                }
            };
            Ok(Command::List(query(&flags)?, table, format))
        }
        "stop" => {
            let flags = Flags::parse("stop", rest, &["--dir"])?;
            Ok(Command::Stop { dir: flags.dir() })
        }
        "insight" => parse_insight(rest),
        other => Err(CliError::usage(format!(
            "unknown command `{other}` (see rayrs --help)"
        ))),
    }
}

const INSIGHT_EXPORT_FLAGS: &[&str] = &[
    "--log",
    "--view",
    "--format",
    "--at",
    "--filter",
    "--metric",
    "--out",
    "--job",
    "--address",
    "--credentials",
    "--dir",
    "--timeout-ms",
];

const INSIGHT_DIFF_FLAGS: &[&str] = &["--before", "--after", "--format", "--metric", "--out"];

const INSIGHT_SERVE_FLAGS: &[&str] = &["--log", "--dashboard-host", "--dashboard-port"];

/// `--dashboard-host` and `--dashboard-port`: loopback and a free port
/// unless told otherwise.
fn dashboard_addr(flags: &Flags) -> Result<SocketAddr, CliError> {
    let host = flags.get("--dashboard-host").unwrap_or("127.0.0.1");
    let port = flags
        .parsed::<u16>("--dashboard-port", "a port number")?
        .unwrap_or(0);
    let ip: std::net::IpAddr = host.parse().map_err(|_| {
        CliError::usage(format!(
            "--dashboard-host must be an IP address, got `{host}`"
        ))
    })?;
    Ok(SocketAddr::new(ip, port))
}

/// `rayrs insight export|diff …`.
fn parse_insight(args: &[String]) -> Result<Command, CliError> {
    let usage = |e: ray_insight::export::ExportError| CliError::usage(e.to_string());
    let required = |flags: &Flags, name: &str| {
        flags
            .get(name)
            .map(str::to_owned)
            .ok_or_else(|| CliError::usage(format!("`rayrs {}` needs {name}", flags.command)))
    };
    let metric = |flags: &Flags| match flags.get("--metric") {
        Some(name) => parse_metric(name).map_err(usage),
        None => Ok(ray_insight::views::FlameMetric::SelfTime),
    };
    let out = |flags: &Flags| flags.get("--out").map(PathBuf::from);
    match args.first().map(String::as_str) {
        Some("export") => {
            let flags = Flags::parse("insight export", &args[1..], INSIGHT_EXPORT_FLAGS)?;
            let view: ViewKind = required(&flags, "--view")?.parse().map_err(usage)?;
            let format = match flags.get("--format") {
                Some(name) => view.check(name.parse().map_err(usage)?).map_err(usage)?,
                None => view.default_format(),
            };
            if flags.has("--metric") && view != ViewKind::Flame {
                return Err(CliError::usage(
                    "--metric applies to --view flame only".into(),
                ));
            }
            let at_nanos = flags
                .parsed::<f64>("--at", "a number of seconds")?
                .map(|secs| {
                    if secs.is_finite() && secs >= 0.0 {
                        // Saturates at u64::MAX nanoseconds (585 years).
                        Ok((secs * 1e9).round() as u64)
                    } else {
                        Err(CliError::usage(format!(
                            "--at must be a number of seconds >= 0, got {secs}"
                        )))
                    }
                })
                .transpose()?;
            let filter = flags
                .get("--filter")
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(CliError::usage(format!(
                        "--filter must be KEY=VALUE, got `{kv}`"
                    ))),
                })
                .transpose()?;
            let source = match flags.get("--log") {
                Some(log) => {
                    if let Some(f) = [
                        "--job",
                        "--address",
                        "--credentials",
                        "--dir",
                        "--timeout-ms",
                    ]
                    .into_iter()
                    .find(|f| flags.has(f))
                    {
                        return Err(CliError::usage(format!(
                            "{f} asks a live cluster; --log reads a file: give one or the other"
                        )));
                    }
                    insight::Source::Log(PathBuf::from(log))
                }
                None => insight::Source::Cluster {
                    query: query(&flags)?,
                    job: flags.parsed::<u32>("--job", "a job number")?,
                },
            };
            Ok(Command::InsightExport(insight::ExportArgs {
                source,
                view,
                format,
                at_nanos,
                filter,
                metric: metric(&flags)?,
                out: out(&flags),
            }))
        }
        Some("diff") => {
            let flags = Flags::parse("insight diff", &args[1..], INSIGHT_DIFF_FLAGS)?;
            let format = match flags.get("--format") {
                None => ExportFormat::Folded,
                Some(name) => match name.parse().map_err(usage)? {
                    f @ (ExportFormat::Folded | ExportFormat::Svg) => f,
                    other => {
                        return Err(CliError::usage(format!(
                            "`rayrs insight diff` cannot write {other}: choose folded or svg"
                        )))
                    }
                },
            };
            Ok(Command::InsightDiff(insight::DiffArgs {
                before: PathBuf::from(required(&flags, "--before")?),
                after: PathBuf::from(required(&flags, "--after")?),
                format,
                metric: metric(&flags)?,
                out: out(&flags),
            }))
        }
        Some("serve") => {
            let flags = Flags::parse("insight serve", &args[1..], INSIGHT_SERVE_FLAGS)?;
            Ok(Command::InsightServe {
                log: PathBuf::from(required(&flags, "--log")?),
                dashboard: dashboard_addr(&flags)?,
            })
        }
        Some(other) => Err(CliError::usage(format!(
            "unknown insight command `{other}`: choose export, diff or serve"
        ))),
        None => Err(CliError::usage(
            "insight what? export, diff or serve (see rayrs --help)".into(),
        )),
    }
}

fn query(flags: &Flags) -> Result<QueryArgs, CliError> {
    Ok(QueryArgs {
        dir: flags.dir(),
        address: flags.address()?,
        credentials: flags.get("--credentials").map(PathBuf::from),
        timeout: flags.timeout()?,
    })
}

fn parse_start(flags: &Flags) -> Result<Command, CliError> {
    let head = flags.has("--head");
    if head {
        // A head makes its own credentials and is the address.
        let allowed: Vec<&str> = JOIN_FLAGS
            .iter()
            .chain(HEAD_ONLY_FLAGS)
            .copied()
            .filter(|f| !matches!(*f, "--address" | "--credentials"))
            .collect();
        flags.only(&allowed)?;
    } else {
        flags.only(JOIN_FLAGS)?;
    }
    let mut resources = match flags.get("--resources") {
        Some(json) => parse_resources(json)?,
        None => ResourceSet::new(),
    };
    let cpus = match flags.parsed::<f64>("--num-cpus", "a number")? {
        Some(n) => Quantity::from_f64(n).map_err(|_| {
            CliError::usage(format!("--num-cpus must be a non-negative number, got {n}"))
        })?,
        None if resources.get("CPU").is_zero() => {
            Quantity::from_units(std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
        }
        None => resources.get("CPU"),
    };
    resources.set("CPU", cpus);
    let health_ms = flags
        .parsed::<u64>("--health-timeout-ms", "a number of milliseconds")?
        .unwrap_or(10_000);
    let args = StartArgs {
        dir: flags.dir(),
        host: flags.get("--host").unwrap_or("127.0.0.1").to_owned(),
        port: flags
            .parsed::<u16>("--port", "a port number")?
            .unwrap_or(6379),
        resources,
        labels: match flags.get("--labels") {
            Some(json) => parse_labels(json)?,
            None => BTreeMap::new(),
        },
        credentials: flags.get("--credentials").map(PathBuf::from),
        health_timeout: Duration::from_millis(health_ms.max(1)),
        timeout: flags.timeout()?,
        dashboard: dashboard_addr(flags)?,
    };
    if head {
        return Ok(Command::Head(args));
    }
    match flags.address()? {
        Some(addr) => Ok(Command::Join(args, addr)),
        None => Err(CliError::usage(
            "`rayrs start` needs --head or --address HOST:PORT".into(),
        )),
    }
}

fn json_object(
    flag: &str,
    json: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    match serde_json::from_str(json) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(CliError::usage(format!(
            "{flag} must be a JSON object, got `{json}`"
        ))),
    }
}

/// `{"CPU": 2, "GPU": 1, "disk": 0.5}` as a resource set.
fn parse_resources(json: &str) -> Result<ResourceSet, CliError> {
    let mut set = ResourceSet::new();
    for (name, value) in json_object("--resources", json)? {
        let q = value
            .as_f64()
            .and_then(|x| Quantity::from_f64(x).ok())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "--resources: `{name}` must be a non-negative number, got {value}"
                ))
            })?;
        set.set(&name, q);
    }
    Ok(set)
}

/// `{"zone": "a"}` as labels.
fn parse_labels(json: &str) -> Result<BTreeMap<String, String>, CliError> {
    json_object("--labels", json)?
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(CliError::usage(format!(
                "--labels: `{k}` must be a string, got {other}"
            ))),
        })
        .collect()
}
