//! How the workload harness (`examples/workloads/`) measures and
//! reports: the figures of one run, their median, min and max over the
//! runs as one JSON line, and the resident memory of processes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

/// One figure measured in one run.
pub struct Measure {
    /// The figure's name, e.g. `throughput`.
    pub name: String,
    /// What it counts, e.g. `tasks/s`.
    pub unit: &'static str,
    /// The value measured.
    pub value: f64,
}

/// What one run of a workload produced: figures (the first is the
/// headline) and counts that describe the run rather than measure it.
#[derive(Default)]
pub struct Run {
    /// The figures, headline first.
    pub figures: Vec<Measure>,
    /// Counts and notes that are not measurements.
    pub info: serde_json::Map<String, Value>,
}

impl Run {
    /// Adds a figure; the first one added is the headline.
    pub fn figure(&mut self, name: impl Into<String>, unit: &'static str, value: f64) {
        self.figures.push(Measure {
            name: name.into(),
            unit,
            value,
        });
    }

    /// Adds the p50 and p99 of `sorted` latencies in µs, named
    /// `{prefix}p50` and `{prefix}p99`.
    pub fn latency_figures(&mut self, prefix: &str, sorted: &[f64]) {
        self.figure(format!("{prefix}p50"), "us", percentile(sorted, 50.0));
        self.figure(format!("{prefix}p99"), "us", percentile(sorted, 99.0));
    }

    /// This run as JSON, for a run made in another process:
    /// `{"figures": [[name, unit, value], ...], "info": {...}}`.
    pub fn to_json(&self) -> Value {
        let figures: Vec<Value> = self
            .figures
            .iter()
            .map(|m| json!([m.name, m.unit, m.value]))
            .collect();
        json!({"figures": figures, "info": self.info})
    }

    /// The run [`Run::to_json`] wrote.
    ///
    /// # Errors
    ///
    /// When `v` is not in that shape.
    pub fn from_json(v: &Value) -> anyhow::Result<Run> {
        let mut run = Run::default();
        for f in v["figures"].as_array().context("a run has figures")? {
            let name = f[0].as_str().context("a figure's name")?;
            // Units are the harness's own constants: keep them `'static`.
            let unit: &'static str = Box::leak(
                f[1].as_str()
                    .context("a figure's unit")?
                    .to_owned()
                    .into_boxed_str(),
            );
            let value = f[2].as_f64().context("a figure's value")?;
            run.figure(name, unit, value);
        }
        run.info = v["info"].as_object().context("a run has info")?.clone();
        Ok(run)
    }
}

/// Median, min and max of one figure over the runs.
pub struct Summary {
    /// The nearest-rank median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

/// Summarizes non-empty `samples`.
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    Summary {
        median: percentile(&s, 50.0),
        min: s[0],
        max: s[s.len() - 1],
    }
}

/// The nearest-rank `p`-th percentile of sorted, non-empty `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `n` events in `elapsed`, per second.
pub fn per_second(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

/// `d` in microseconds.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// GB/s (10^9 bytes) of `bytes` moved in `elapsed`.
pub fn gb_per_second(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e9
}

/// The figures of a workload's runs, gathered for its JSON line.
#[derive(Default)]
pub struct Samples {
    /// Figure names in the order first seen: the headline first.
    order: Vec<String>,
    samples: BTreeMap<String, (&'static str, Vec<f64>)>,
    info: serde_json::Map<String, Value>,
}

impl Samples {
    /// Adds one run's figures; its info replaces the previous run's.
    pub fn add(&mut self, run: Run) {
        for m in run.figures {
            if !self.samples.contains_key(&m.name) {
                self.order.push(m.name.clone());
            }
            self.samples
                .entry(m.name)
                .or_insert((m.unit, Vec::new()))
                .1
                .push(m.value);
        }
        self.info = run.info;
    }

    /// Adds a count or note that describes the workload's runtime.
    pub fn info(&mut self, key: &str, value: Value) {
        self.info.insert(key.into(), value);
    }

    /// The JSON line: `header`, then the headline figure's name, median,
    /// min, max and unit, every figure under `figures`, and `info`.
    ///
    /// # Errors
    ///
    /// When no run measured anything.
    pub fn into_line(self, mut header: serde_json::Map<String, Value>) -> anyhow::Result<Value> {
        let mut figures = serde_json::Map::new();
        for name in &self.order {
            let (unit, values) = &self.samples[name];
            let s = summarize(values);
            figures.insert(
                name.clone(),
                json!({"median": s.median, "min": s.min, "max": s.max, "unit": unit}),
            );
        }
        let headline = self
            .order
            .first()
            .context("a workload measures something")?;
        header.insert("figure".into(), json!(headline));
        for key in ["median", "min", "max", "unit"] {
            header.insert(key.into(), figures[headline][key].clone());
        }
        header.insert("figures".into(), Value::Object(figures));
        header.insert("info".into(), Value::Object(self.info));
        Ok(Value::Object(header))
    }
}

/// Resident set size of process `pid`, from /proc/PID/statm.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/statm");
    let statm = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm has a resident field")?
        .parse()
        .context("statm resident field")?;
    Ok(pages * 4096)
}

/// Resident set size of process `pid` as the kernel reports it: `VmRSS`
/// of /proc/PID/status.
///
/// # Errors
///
/// When the file cannot be read (the process is gone) or has no `VmRSS`.
pub fn vm_rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .with_context(|| format!("{path} has no VmRSS"))?
        .parse()
        .with_context(|| format!("{path}: VmRSS"))?;
    Ok(kib * 1024)
}

/// Every process's children, by parent pid, as /proc shows them now.
fn children_by_parent() -> anyhow::Result<BTreeMap<u32, Vec<u32>>> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").context("read /proc")? {
        let Some(pid) = entry
            .ok()
            .and_then(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        else {
            continue;
        };
        // A process may end while we look: skip what cannot be read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    Ok(children)
}

/// The direct children of process `pid` (for a node daemon: its worker
/// processes), sorted.
///
/// # Errors
///
/// When /proc cannot be read.
pub fn child_pids(pid: u32) -> anyhow::Result<Vec<u32>> {
    let mut out = children_by_parent()?.remove(&pid).unwrap_or_default();
    out.sort_unstable();
    Ok(out)
}

/// Resident set size of this process and all its descendants (in cluster
/// mode: the node daemons and their worker processes, where actors live).
///
/// # Errors
///
/// When /proc or this process's own statm cannot be read; descendants that
/// end while being looked at count as 0.
pub fn tree_rss_bytes() -> anyhow::Result<u64> {
    let me = std::process::id();
    let children = children_by_parent()?;
    let mut total = rss_bytes(me)?;
    let mut stack = children.get(&me).cloned().unwrap_or_default();
    while let Some(pid) = stack.pop() {
        total += rss_bytes(pid).unwrap_or(0);
        stack.extend(children.get(&pid).into_iter().flatten().copied());
    }
    Ok(total)
}
