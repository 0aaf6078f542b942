//! The dashboard in a real browser: an embedded runtime runs W7 and then a
//! program that deadlocks (two actors calling each other synchronously),
//! serving its dashboard; headless Chromium opens each of the five tabs,
//! the test checks what the page shows (node names, edge counts and the
//! labels kept from overprinting, the bottleneck panel, the deadlock
//! marked, flame frames by instance and folded into classes, Gantt states
//! told apart and its arrows bundled, the job's name in the selector) and
//! saves a screenshot of each tab under `target/tmp/dashboard-screenshots/`.
//! A page asked for without the token is refused.
//!
//! Needs Chromium (`chromium`, `chromium-browser` or `google-chrome`, or the
//! path in `CHROMIUM`); `.ci/run` installs it. Without one the test says so
//! and passes, except in CI (`CI=true`), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ray_core::insight::InsightOptions;
use ray_core::Config;

#[path = "../examples/shapes/tree.rs"]
mod tree;

use ray_test_support::deadlock::{Left, Right};

// The runtime-shaped record generator of ray-insight's scale tests.
use ray_test_support::workload;

/// The Chromium to drive, if this machine has one.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
    })
}

/// The most edge labels the logical tab draws by default (its labels
/// selector's first choice), and the most arrows the Gantt chart draws
/// (`MAX_ARROWS` in app.js).
const MAX_LABELS: u64 = 8;
const MAX_ARROWS: u64 = 120;

/// The part of `dom` from the attribute `start` (`id="x"`) up to `end`
/// (the whole rest of the page when absent).
fn element<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let from = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in the page"));
    let rest = &dom[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// What the job selector should show for `/api/jobs`' first job: its
/// label (the driver program's name) and its id, as app.js's `jobText`.
fn job_text(job: &serde_json::Value) -> String {
    let id = job["job"].as_str().expect("a job id");
    let label = job["label"].as_str().unwrap_or("").trim();
    let text = if label.is_empty() || label == id {
        id.to_owned()
    } else {
        format!("{label} · {id}")
    };
    if job["latest"] == true {
        format!("{text} (latest)")
    } else {
        text
    }
}

/// The number in `attr="N"` of `dom` (0 when absent).
fn data_count(dom: &str, attr: &str) -> u64 {
    dom.split(&format!("{attr}=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Opens `url` (a tab's address) twice: its DOM after the page settled,
/// and a screenshot saved as `shot`, which must exist.
fn open_tab(chromium: &Path, url: &str, shot: &Path) -> String {
    let dom = headless(chromium, url, &["--dump-dom"]);
    let _ = std::fs::remove_file(shot);
    headless(
        chromium,
        url,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,1000",
        ],
    );
    assert!(
        std::fs::metadata(shot).is_ok_and(|m| m.len() > 10_000),
        "no screenshot at {}",
        shot.display()
    );
    dom
}

/// Where the screenshots go.
fn screenshots() -> PathBuf {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// The Chromium to drive; `None` (the test is skipped, and says so) on a
/// machine without one, except in CI, which must have it.
fn chromium_or_skip() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have Chromium (.ci/run installs it)"
        );
        eprintln!("no Chromium on this machine: the browser test is skipped");
    }
    found
}

/// Runs headless Chromium on `url` with `extra` arguments; its stdout.
fn headless(chromium: &Path, url: &str, extra: &[&str]) -> String {
    let profile = std::env::temp_dir().join(format!("rayrs-chromium-{}", std::process::id()));
    let output = Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_w7_and_a_deadlock_in_a_real_browser() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let ray = ray_core::init_with(Config {
        num_cpus: Some(2.0),
        insight: Some(InsightOptions {
            dashboard: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            ..InsightOptions::default()
        }),
        ..Config::default()
    })
    .await
    .expect("runtime starts, recording and serving");
    let insight = ray.insight().expect("recording");
    let url = insight.dashboard_url().expect("a dashboard URL");

    let run = tree::run(&ray, tree::DEFAULT_SEED).await.expect("W7 runs");
    assert_eq!((run.actors, run.calls), (12, 6321));
    eprintln!("W7 ran in {:.3} s", run.seconds);
    assert!(insight.settle(Duration::from_secs(5)).await);
    // Then the program that deadlocks, left hanging while the browser looks.
    let left = Left::remote(&ray).unwrap();
    let right = Right::remote(&ray).unwrap();
    let hung = left.ping(right.clone(), left.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stacks = insight
            .export("stack", "text", None)
            .expect("stack view")
            .expect("embedded views");
        if stacks.contains("DEADLOCK") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no deadlock within 20 s: {stacks}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let token = url.split("token=").nth(1).expect("a token in the URL");
    let (status, jobs) = tokio::task::block_in_place(|| {
        ray_test_support::http::get_url(&url, &format!("/api/jobs?token={token}"))
    });
    assert_eq!(status, 200, "{jobs}");
    let jobs: serde_json::Value = serde_json::from_str(&jobs).expect("jobs as JSON");
    let shown_job = job_text(&jobs[0]);

    let shots = screenshots();
    let mut report = Vec::new();
    // The flame graph twice: by instance (the default), then folded.
    for tab in [
        "logical",
        "physical",
        "stack",
        "flame",
        "flame?fold=class",
        "gantt",
    ] {
        let page = format!("{url}#{tab}");
        let shot = shots.join(format!("{}.png", tab.replace("?fold=", "-")));
        let dom = tokio::task::block_in_place(|| open_tab(&chromium, &page, &shot));
        let panel = tab.split('?').next().expect("a tab");
        assert!(
            dom.contains(&format!("id=\"panel-{panel}\"")),
            "the {tab} panel is missing"
        );
        // Every tab: the job selector names the job as /api/jobs does.
        let selector = element(&dom, "id=\"job-select\"", "</select>");
        assert!(
            selector.contains(&format!(">{shown_job}</option>")),
            "the job selector does not show {shown_job:?}: {selector}"
        );
        match tab {
            // The 12 actor instances of the tree's class, and the driver's
            // one call into the root; process() edges carry counts, the
            // busiest labelled (no more than the labels selector's 8),
            // widths with a legend. Above the graph, the bottlenecks: the
            // instances with the most self time (leaves, named by
            // instance) and the deadlock.
            "logical" => {
                assert!(dom.contains("TreeNode"), "no TreeNode node in {tab}");
                assert!(dom.contains("class=\"node"), "no graph nodes in {tab}");
                let labels = dom.matches("class=\"edge-label\"").count() as u64;
                assert!(
                    (1..=MAX_LABELS).contains(&labels),
                    "{labels} edge labels: the busiest only"
                );
                assert_eq!(data_count(&dom, "data-labels"), labels);
                assert!(dom.contains("×1,000</text>"), "no ×1,000 edge label");
                let edges = dom.matches("class=\"edge call").count() as u64;
                assert!(edges > labels, "{edges} call edges, {labels} labelled");
                assert!(dom.contains("class=\"lg-w\""), "no width legend");
                let panel = element(&dom, "id=\"bottlenecks\"", "</details>");
                let self_time = element(panel, "data-kind=\"self\"", "</section>");
                assert!(
                    self_time.contains("TreeNode[actor-"),
                    "the bottlenecks do not name instances: {self_time}"
                );
                let deadlocks = element(panel, "data-kind=\"deadlocks\"", "</section>");
                assert!(deadlocks.contains("DEADLOCK"), "{deadlocks}");
            }
            "physical" => {
                assert!(dom.contains("phys-node"), "no node box in {tab}");
                assert!(dom.contains("node-1"), "the node is not named in {tab}");
                // Each actor with finished calls shows the CPU time they took.
                let cpu: Vec<f64> = dom
                    .split("data-cpu-ms=\"")
                    .skip(1)
                    .filter_map(|rest| rest.split('"').next()?.parse().ok())
                    .collect();
                assert!(
                    !cpu.is_empty() && cpu.iter().all(|ms| *ms >= 0.0),
                    "no actor shows its CPU time: {cpu:?}"
                );
            }
            "stack" => {
                assert!(dom.contains("DEADLOCK"), "the deadlock is not shown");
                assert!(dom.contains("in-deadlock"), "no task marked in-deadlock");
                assert!(dom.contains("ping") && dom.contains("pong"), "{tab}");
            }
            // By instance: frames name `TreeNode[actor-…].process`.
            "flame" => {
                let frames = data_count(&dom, "data-frames");
                let instances = data_count(&dom, "data-instance-frames");
                assert!(frames > 12, "{frames} flame frames");
                assert!(instances >= 6, "{instances} frames name an instance");
            }
            // Folded: the same graph, no frame names an instance.
            "flame?fold=class" => {
                assert!(dom.contains("frames by class"), "the fold is not set");
                let frames = data_count(&dom, "data-frames");
                assert!(frames > 0, "no flame frames folded");
                assert!(
                    dom.contains("data-instance-frames=\"0\""),
                    "a folded frame still names an instance"
                );
            }
            // One lane per actor and worker thread, the tree's slices
            // drawn; running and waiting (the parents blocked on their
            // children's results) drawn apart with a legend; the arrows
            // bundled, fewer than the calls.
            "gantt" => {
                assert!(
                    data_count(&dom, "data-lanes") >= 12,
                    "fewer lanes than actors"
                );
                assert!(data_count(&dom, "data-slices") > 100, "few slices drawn");
                assert!(dom.contains("TreeNode"), "no actor lane named in {tab}");
                let legend = element(&dom, "id=\"gantt-legend\"", "id=\"gantt-info\"");
                for state in ["st-running", "st-blocked", "st-submitted"] {
                    assert!(legend.contains(state), "no {state} in the legend");
                }
                assert!(
                    data_count(&dom, "data-drawn-running") > 0,
                    "no running drawn"
                );
                assert!(
                    data_count(&dom, "data-drawn-waiting") > 0,
                    "no waiting drawn"
                );
                let arrows = data_count(&dom, "data-arrows");
                assert!(
                    (1..=MAX_ARROWS).contains(&arrows),
                    "{arrows} arrows: bundled"
                );
                assert!(arrows < data_count(&dom, "data-flows"), "{arrows} arrows");
            }
            _ => unreachable!(),
        }
        report.push(format!("{tab}: {}", shot.display()));
    }
    // The page without its token is refused.
    let bare = url.split('?').next().expect("a URL");
    let refused = tokio::task::block_in_place(|| headless(&chromium, bare, &["--dump-dom"]));
    assert!(
        refused.contains("a valid token is required"),
        "the page was served without a token: {refused}"
    );
    eprintln!("screenshots:\n  {}", report.join("\n  "));
    ray.shutdown();
    drop(hung);
}

/// Scale: 10,000 actors and 200,000 recorded tasks (runtime-shaped, from
/// ray-insight's generator) served from a `ViewsSource`. The server sends
/// summaries, so every tab renders: the logical graph shows each actor class
/// as one node that says how many instances it stands for, the physical
/// view lists the busiest workers and counts the rest, the stack view lists
/// the blocked tasks, and the Gantt chart draws its lanes with merged
/// slices. Screenshots: `scale-<tab>.png`.
#[test]
fn the_dashboard_shows_ten_thousand_actors_as_summaries() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let mut views = ray_insight::Views::default();
    let fed = Instant::now();
    let records = workload::feed_all(
        workload::Shape {
            tasks: 200_000,
            ..workload::FULL
        },
        &mut views,
    );
    eprintln!("{records} records fed in {:.2?}", fed.elapsed());
    let source = ray_dashboard::ViewsSource::new("job-1", views, None);
    let dashboard =
        ray_dashboard::Dashboard::start(Default::default(), source).expect("the dashboard starts");
    let shots = screenshots();
    for tab in ["logical", "physical", "stack", "gantt"] {
        let page = format!("{}#{tab}", dashboard.url());
        let shot = shots.join(format!("scale-{tab}.png"));
        let began = Instant::now();
        let dom = open_tab(&chromium, &page, &shot);
        eprintln!(
            "{tab}: rendered in {:.2?}: {}",
            began.elapsed(),
            shot.display()
        );
        assert!(!dom.contains("class=\"error\""), "{tab} shows an error");
        assert!(
            dom.contains(">job-1 (latest)</option>"),
            "the job selector does not show job-1"
        );
        match tab {
            "logical" => {
                assert!(dom.contains("10,000 actors"), "the actor count is not said");
                assert!(dom.contains("kind-class"), "no class node drawn");
                assert!(
                    dom.contains("instances"),
                    "a class node does not count its instances"
                );
            }
            "physical" => {
                assert!(dom.contains("phys-node"), "no node box");
                assert!(
                    dom.contains("more actors"),
                    "the actors not listed are not counted"
                );
            }
            "stack" => assert!(dom.contains("stack-task"), "no stack shown"),
            "gantt" => {
                let lanes = data_count(&dom, "data-lanes");
                let slices = data_count(&dom, "data-slices");
                assert!(lanes > 50, "{lanes} lanes");
                assert!(slices > 0 && slices <= 2_000, "{slices} slices");
                assert!(data_count(&dom, "data-arrows") <= MAX_ARROWS);
            }
            _ => unreachable!(),
        }
    }
}
