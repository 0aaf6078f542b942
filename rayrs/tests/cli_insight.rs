//! `rayrs insight` on the event log of a real run: a few tasks and actor
//! calls on the embedded runtime, recorded (one test per file: it installs
//! the process's global subscriber), written with `LogWriter`, then
//! exported, filtered, replayed at a time, damaged and diffed by the real
//! binary.

use ray_test_support::{embedded, http, recording};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_insight::export::{export, ExportFormat, ViewKind};
use ray_insight::log::{read_log, replay, LogWriter};
use ray_insight::views::LogicalNode;
use ray_insight::{Limits, MemorySink, Record, RecordKind, Views};
use serde_json::Value;

const RAYRS: &str = env!("CARGO_BIN_EXE_rayrs");

#[remote]
fn square(x: u64) -> u64 {
    x * x
}

#[remote]
fn sum_squares(n: u64) -> u64 {
    ray_core::insight::context(&[("stage", "sum")]);
    let ray = Ray::current().expect("in a task");
    (1..=n)
        .map(|i| {
            square::remote(&ray, i)
                .expect("submitted")
                .get_blocking()
                .expect("squared")
        })
        .sum()
}

#[remote]
struct Tally {
    total: u64,
}

#[remote]
impl Tally {
    fn new() -> Self {
        Tally { total: 0 }
    }

    fn add(&mut self, x: u64) -> u64 {
        self.total += x;
        self.total
    }
}

/// Calls into functions or methods whose name ends with `name`.
fn calls(views: &Views, name: &str) -> u64 {
    views
        .snapshot()
        .logical()
        .call_edges
        .iter()
        .filter(|e| e.name.ends_with(name))
        .map(|e| e.count)
        .sum()
}

/// Runs the job with recording on; returns the log epoch and the records.
async fn record_a_run() -> (u64, Vec<Record>) {
    let collector = recording::record_globally();
    let epoch = collector.epoch_unix_nanos();
    let ray = embedded::runtime(2.0).await;
    assert_eq!(
        sum_squares::remote(&ray, 4).unwrap().get().await.unwrap(),
        30
    );
    let tally = Tally::remote(&ray).unwrap();
    for x in 1..=3 {
        tally.add(x).unwrap().get().await.unwrap();
    }
    // A span closes just after its result is stored: drain until every
    // call has finished in the records.
    let mut sink = MemorySink::new(1_000_000);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        collector.drain_into(&mut sink);
        let views = replay(sink.records(), Limits::default(), None);
        let done = calls(&views, "sum_squares") == 1
            && calls(&views, "::square") == 4
            && calls(&views, "add") == 3
            && views.stats().live_tasks == 0
            && views.stats().live_spans == 0;
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not finish in the records: {:?}",
            views.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ray.shutdown();
    (epoch, sink.take_records())
}

/// A fresh directory for this test's files.
fn temp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_insight");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn rayrs(args: &[&str]) -> Output {
    Command::new(RAYRS).args(args).output().expect("rayrs runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `rayrs insight export` that must succeed; its stdout.
fn exported(args: &[&str]) -> String {
    let mut all = vec!["insight", "export"];
    all.extend_from_slice(args);
    let out = rayrs(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "rayrs {all:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The midpoint of the `sum_squares` task's span: it is running then.
fn while_summing(records: &[Record]) -> u64 {
    let is_sum = |r: &Record| {
        r.field("function")
            .and_then(|f| f.as_str())
            .is_some_and(|f| f.ends_with("::sum_squares"))
    };
    let open = records
        .iter()
        .find(|r| r.kind == RecordKind::SpanNew && r.name == "task.run" && is_sum(r))
        .expect("sum_squares ran");
    // A close record, or the opening itself when the run was one record.
    let close = records
        .iter()
        .filter(|r| r.span == open.span)
        .find_map(Record::closed_at)
        .expect("sum_squares finished");
    open.at_nanos + (close - open.at_nanos) / 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayrs_insight_exports_filters_replays_and_diffs_a_recorded_run() {
    let (epoch, records) = record_a_run().await;
    let dir = temp_dir();
    let log_path = dir.join("run.rayrslog");
    let mut writer = LogWriter::create(&log_path, epoch).expect("log created");
    // Several frames, so that a truncated copy keeps a prefix.
    for batch in records.chunks(16) {
        writer.append(batch).expect("appended");
    }
    writer.flush().expect("flushed");
    drop(writer);
    let log = log_path.to_str().expect("a UTF-8 path");

    // Every view in every format it supports.
    for view in ViewKind::ALL {
        for &format in view.formats() {
            let text = exported(&[
                "--log",
                log,
                "--view",
                view.as_str(),
                "--format",
                format.as_str(),
            ]);
            match format {
                ExportFormat::Json | ExportFormat::Chrome => {
                    serde_json::from_str::<Value>(&text)
                        .unwrap_or_else(|e| panic!("{view} {format} is not JSON: {e}"));
                }
                ExportFormat::Dot => assert!(
                    text.starts_with("// records: ") && text.contains("\ndigraph"),
                    "{text}"
                ),
                ExportFormat::Folded => assert!(text.contains("::sum_squares;"), "{text}"),
                ExportFormat::Svg => {
                    assert!(text.contains("<svg") && text.contains("sum_squares"))
                }
                // Nothing is blocked at the end of the run: only the
                // record counts.
                ExportFormat::Text => {
                    assert_eq!(text.lines().count(), 1, "{view} {format}: {text}");
                    assert!(text.contains("0 lost"), "{text}");
                }
            }
        }
    }
    // The binary's export is the library's export of the same records.
    let views = replay(&records, Limits::default(), None);
    assert_eq!(
        exported(&["--log", log, "--view", "logical"]),
        export(&views.snapshot(), ViewKind::Logical, ExportFormat::Json).expect("json")
    );
    let logical: Value =
        serde_json::from_str(&exported(&["--log", log, "--view", "logical"])).expect("json");
    assert!(logical.to_string().contains("Tally"), "{logical}");
    // Frames by instance, or folded into classes with --fold class.
    let by_instance = exported(&["--log", log, "--view", "flame"]);
    let by_class = exported(&["--log", log, "--view", "flame", "--fold", "class"]);
    assert!(by_instance.contains("Tally[actor-"), "{by_instance}");
    assert!(
        by_class.contains("Tally.") && !by_class.contains("[actor-"),
        "{by_class}"
    );
    let waiting = exported(&["--log", log, "--view", "flame", "--metric", "waiting"]);
    let self_time = exported(&["--log", log, "--view", "flame"]);
    assert_ne!(waiting, self_time);

    // --at: halfway through sum_squares, it is still running.
    let at = while_summing(&records);
    let at_secs = format!("{:.9}", at as f64 / 1e9);
    let stack = exported(&["--log", log, "--view", "stack", "--at", &at_secs]);
    assert!(stack.contains("sum_squares"), "{stack}");
    let then = replay(&records, Limits::default(), Some(at));
    assert!(then.stats().live_tasks >= 1);
    let gantt: Value = serde_json::from_str(&exported(&[
        "--log", log, "--view", "gantt", "--at", &at_secs,
    ]))
    .expect("json");
    assert!(gantt["traceEvents"]
        .as_array()
        .is_some_and(|e| !e.is_empty()));

    // --filter: the labelled task and its children, without the actor.
    let sum_only: Value = serde_json::from_str(&exported(&[
        "--log",
        log,
        "--view",
        "logical",
        "--filter",
        "stage=sum",
    ]))
    .expect("json");
    let text = sum_only.to_string();
    assert!(
        text.contains("sum_squares") && text.contains("::square"),
        "{text}"
    );
    assert!(!text.contains("Tally"), "{text}");
    let nothing = exported(&["--log", log, "--view", "flame", "--filter", "stage=none"]);
    assert_eq!(nothing, "");
    // Several filters: a task must have every label.
    let one = ["--log", log, "--view", "flame", "--filter", "stage=sum"];
    let both = [&one[..], &["--filter", "stage=none"]].concat();
    assert_eq!(
        exported(&both),
        "",
        "no task has both stage=sum and stage=none"
    );
    let twice = [&one[..], &["--filter", "stage=sum"]].concat();
    assert_eq!(exported(&twice), exported(&one));
    let filtered = views.filter("stage", "sum").logical();
    assert!(filtered
        .call_edges
        .iter()
        .all(|e| !matches!(e.to, LogicalNode::Actor { .. })));

    // top: the bottleneck summary, from the same log.
    let top = rayrs(&["insight", "top", "--log", log, "-n", "3"]);
    assert_eq!(top.status.code(), Some(0), "{}", stderr(&top));
    let text = stdout(&top);
    assert!(text.starts_with("most self time"), "{text}");
    assert!(text.contains("sum_squares"), "{text}");
    assert!(text.contains("deadlocks:\n  (none)"), "{text}");
    let top_none = rayrs(&["insight", "top", "--log", log, "--filter", "stage=none"]);
    assert!(stdout(&top_none).contains("most self time (work the call did itself):\n  (none)"));

    // --out writes the file, not stdout.
    let out_path = dir.join("flame.svg");
    let out = exported(&[
        "--log",
        log,
        "--view",
        "flame",
        "--format",
        "svg",
        "--out",
        out_path.to_str().expect("UTF-8"),
    ]);
    assert_eq!(out, "");
    let svg = std::fs::read_to_string(&out_path).expect("written");
    assert!(svg.contains("<svg") && svg.contains("sum_squares"));

    // A log cut inside its header (only its magic written): damaged too,
    // an empty export and exit 3, not a failure.
    let bytes = std::fs::read(&log_path).expect("log");
    let magic_path = dir.join("magic.rayrslog");
    std::fs::write(&magic_path, &bytes[..8]).expect("written");
    let magic = magic_path.to_str().expect("UTF-8");
    let out = rayrs(&["insight", "export", "--log", magic, "--view", "flame"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));

    // A truncated copy: the prefix is exported, a warning, exit 3.
    let cut_path = dir.join("cut.rayrslog");
    std::fs::write(&cut_path, &bytes[..bytes.len() - 7]).expect("written");
    let cut = cut_path.to_str().expect("UTF-8");
    let out = rayrs(&["insight", "export", "--log", cut, "--view", "flame"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let warning = stderr(&out);
    assert_eq!(warning.lines().count(), 1, "{warning}");
    assert!(warning.starts_with("rayrs: warning: "), "{warning}");
    assert!(
        warning.contains("truncated") && warning.contains("records"),
        "{warning}"
    );
    let prefix = read_log(&cut_path).expect("still a log");
    assert!(prefix.stopped.is_some());
    assert!(!prefix.records.is_empty() && prefix.records.len() < records.len());
    let prefix_views = replay(&prefix.records, Limits::default(), None);
    assert_eq!(
        stdout(&out),
        export(
            &prefix_views.snapshot(),
            ViewKind::Flame,
            ExportFormat::Folded
        )
        .expect("folded")
    );

    // Not a log: a clear error, exit 1.
    let garbage = dir.join("garbage.bin");
    std::fs::write(&garbage, b"\x00\x01garbage, not a log").expect("written");
    let out = rayrs(&[
        "insight",
        "export",
        "--log",
        garbage.to_str().expect("UTF-8"),
        "--view",
        "logical",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not a ray-rs insight log"),
        "{}",
        stderr(&out)
    );

    // An unsupported view and format pair, or an unknown view: exit 2.
    let out = rayrs(&[
        "insight", "export", "--log", log, "--view", "physical", "--format", "dot",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("choose json"), "{}", stderr(&out));
    let out = rayrs(&["insight", "export", "--log", log, "--view", "flames"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    // A fold that is not one, or on a view with no frames: exit 2.
    let out = rayrs(&[
        "insight", "export", "--log", log, "--view", "flame", "--fold", "classes",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("instance"), "{}", stderr(&out));
    let out = rayrs(&[
        "insight", "export", "--log", log, "--view", "logical", "--fold", "class",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--fold applies"), "{}", stderr(&out));

    // diff: two folded files, and a log against a folded file.
    let before = dir.join("before.folded");
    std::fs::write(
        &before,
        exported(&["--log", log, "--view", "flame", "--at", &at_secs]),
    )
    .expect("written");
    let after = dir.join("after.folded");
    std::fs::write(&after, &self_time).expect("written");
    let (before, after) = (
        before.to_str().expect("UTF-8"),
        after.to_str().expect("UTF-8"),
    );
    let out = rayrs(&["insight", "diff", "--before", before, "--after", after]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let diff = stdout(&out);
    let sum_line = diff
        .lines()
        .find(|l| l.ends_with(|c: char| c.is_ascii_digit()) && l.contains("::sum_squares "))
        .unwrap_or_else(|| panic!("no sum_squares path in {diff}"));
    let counts: Vec<u64> = sum_line
        .rsplitn(3, ' ')
        .take(2)
        .map(|n| n.parse().expect("a count"))
        .collect();
    // [after, before]: halfway, sum_squares had not finished (no self time
    // of its own yet); at the end it had.
    assert_eq!(counts[1], 0, "{sum_line}");
    assert!(counts[0] > 0, "{sum_line}");
    let out = rayrs(&[
        "insight", "diff", "--before", before, "--after", log, "--format", "svg",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("<svg"));
    let out = rayrs(&["insight", "diff", "--before", before, "--after", cut]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).contains("::square"));

    serve_the_log(log, &records);
}

/// `rayrs insight serve`: the log's dashboard, behind a token, with the
/// summaries of the whole run and the stack replayed halfway; SIGTERM
/// stops it cleanly.
fn serve_the_log(log: &str, records: &[Record]) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(RAYRS)
        .args(["insight", "serve", "--log", log])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rayrs starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.trim().strip_prefix("dashboard: ").map(str::to_owned))
        .expect("the dashboard URL printed");
    let token = url.split("token=").nth(1).expect("a token in the URL");
    let job = Path::new(log)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a file name");

    let (status, _) = http::get_url(&url, "/api/summary?view=logical");
    assert_eq!(status, 401, "no token, no views");
    let (status, body) = http::get_url(&url, &format!("/api/summary?token={token}&view=logical"));
    assert_eq!(status, 200, "{body}");
    let logical: Value = serde_json::from_str(&body).expect("JSON");
    let names = logical["nodes"].to_string();
    assert!(
        names.contains("sum_squares") && names.contains("Tally"),
        "{names}"
    );
    let (status, jobs) = http::get_url(&url, &format!("/api/jobs?token={token}"));
    assert_eq!(status, 200);
    assert!(jobs.contains(job), "{jobs}");
    // The time slider: halfway, sum_squares is still on the stack.
    let at = while_summing(records);
    let (status, body) = http::get_url(
        &url,
        &format!("/api/summary?token={token}&view=stack&at={at}"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sum_squares"), "{body}");

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "rayrs insight serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
