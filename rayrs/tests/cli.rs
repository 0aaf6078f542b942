//! End-to-end tests of the `rayrs` binary: real processes on loopback.
//!
//! Each test gets its own cluster directory and lets the head pick its port
//! (`--port 0`; the address is read back from the directory), so tests run
//! in parallel without port races. Every child is killed when its guard
//! drops, also when a test fails. Deadlines are generous and only bound
//! polling: no test asserts on wall-clock time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use ray_transport::ClusterCa;
use serde_json::Value;

const RAYRS: &str = env!("CARGO_BIN_EXE_rayrs");
/// How long any one thing may take before the test fails: generous, for a
/// loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// A child process killed (SIGKILL) and reaped when dropped.
struct Guard(Child);

impl Guard {
    fn spawn(args: &[&str]) -> Self {
        let child = Command::new(RAYRS)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rayrs");
        Self(child)
    }

    /// Waits for the process to exit, up to `DEADLINE`.
    fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "rayrs did not exit in time");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh cluster directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rayrs-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }

    fn join(&self, p: &str) -> String {
        self.0.join(p).to_str().expect("utf-8 temp path").to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `rayrs args` to completion (killing it past `DEADLINE`).
fn rayrs(args: &[&str]) -> Output {
    let mut child = Command::new(RAYRS)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rayrs");
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("`rayrs {}` hung", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts `out` failed with exactly one line on stderr, and returns it.
fn one_line_failure(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure, got {out:?}");
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "stderr: {err:?}");
    assert!(err.starts_with("rayrs: "), "stderr: {err:?}");
    assert!(!err.contains("panicked"), "stderr: {err:?}");
    err
}

/// Polls `check` until it returns `Some`, up to `DEADLINE`.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a head in `dir` with a 1 s health timeout and waits for its address.
fn start_head(dir: &TempDir) -> (Guard, String) {
    let head = Guard::spawn(&[
        "start",
        "--head",
        "--port",
        "0",
        "--num-cpus",
        "2",
        "--dir",
        dir.path(),
        "--health-timeout-ms",
        "1000",
    ]);
    let addr = eventually("the head's address", || {
        let text = std::fs::read_to_string(dir.join("gcs_address")).ok()?;
        Some(text.trim().to_owned()).filter(|a| !a.is_empty())
    });
    (head, addr)
}

/// `rayrs list nodes --format json` against `dir`'s cluster, if it answers.
fn nodes(dir: &TempDir) -> Option<Vec<Value>> {
    let out = rayrs(&["list", "nodes", "--format", "json", "--dir", dir.path()]);
    if !out.status.success() {
        return None;
    }
    match serde_json::from_slice(&out.stdout).expect("list nodes prints JSON") {
        Value::Array(nodes) => Some(nodes),
        other => panic!("expected a JSON array, got {other}"),
    }
}

fn state_of(nodes: &[Value], id: u64) -> Option<&str> {
    nodes
        .iter()
        .find(|n| n["id"] == id)
        .and_then(|n| n["state"].as_str())
}

/// Credentials of a cluster that is not the one under test.
fn foreign_credentials(dir: &TempDir) -> String {
    let ca = ClusterCa::generate().expect("generate CA");
    let creds = ca.issue("stranger").expect("issue");
    let path = dir.join("foreign");
    creds.save(Path::new(&path)).expect("save credentials");
    path
}

#[test]
fn joined_node_shows_alive_then_dead_after_kill_and_stop_ends_the_head() {
    let dir = TempDir::new("lifecycle");
    let (mut head, addr) = start_head(&dir);
    let mut node = Guard::spawn(&[
        "start",
        "--address",
        &addr,
        "--credentials",
        &dir.join("credentials"),
        "--num-cpus",
        "3",
        "--resources",
        r#"{"GPU": 1}"#,
        "--labels",
        r#"{"zone": "b"}"#,
        "--dir",
        dir.path(),
    ]);

    let listed = eventually("two alive nodes", || {
        let nodes = nodes(&dir)?;
        let alive = nodes.iter().filter(|n| n["state"] == "alive").count();
        (alive == 2).then_some(nodes)
    });
    let joined = listed.iter().find(|n| n["id"] == 2).expect("node 2 listed");
    assert_eq!(joined["resources"]["CPU"], 3.0);
    assert_eq!(joined["resources"]["GPU"], 1.0);
    assert_eq!(joined["labels"]["zone"], "b");

    let status = rayrs(&["status", "--dir", dir.path()]);
    assert!(status.status.success(), "{}", stderr(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("Nodes: 2 (2 alive, 0 dead)"), "{text}");
    // A reader that goes away (`rayrs status | head -0`) ends it quietly.
    let mut child = Command::new(RAYRS)
        .args(["status", "--dir", dir.path()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rayrs runs");
    drop(child.stdout.take());
    let closed = child.wait_with_output().expect("rayrs ends");
    assert!(closed.status.success(), "{}", stderr(&closed));
    assert!(!stderr(&closed).contains("panicked"), "{}", stderr(&closed));
    // Used over total per resource; an idle node reports nothing in use.
    assert!(text.contains("CPU 0/3, GPU 0/1"), "{text}");
    assert_eq!(joined["used"], serde_json::json!({}), "{joined}");
    assert!(
        text.contains("Jobs: 0") && text.contains("Actors: 0"),
        "{text}"
    );

    // kill -9: the node cannot say goodbye; only its silence tells.
    node.0.kill().expect("kill node");
    node.wait();
    let after = eventually("the killed node to be marked dead", || {
        let nodes = nodes(&dir)?;
        (state_of(&nodes, 2) == Some("dead")).then_some(nodes)
    });
    assert_eq!(state_of(&after, 1), Some("alive"), "{after:?}");
    let cause = after[1]["death_cause"].as_str().unwrap_or_default();
    assert!(cause.contains("heartbeat"), "{cause}");
    // A dead node shows its total, not what it held when it died.
    let status = rayrs(&["status", "--dir", dir.path()]);
    let text = String::from_utf8_lossy(&status.stdout);
    let dead = text
        .lines()
        .find(|l| l.contains(" dead "))
        .unwrap_or_else(|| panic!("a dead node line in {text}"));
    assert!(
        dead.contains("CPU 3, GPU 1") && !dead.contains('/'),
        "{dead}"
    );

    let stop = rayrs(&["stop", "--dir", dir.path()]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    assert!(head.wait().success(), "the head exits cleanly on SIGTERM");
    let pids = std::fs::read_dir(dir.join("pids"))
        .expect("pid dir")
        .count();
    assert_eq!(pids, 0, "stop leaves no pid files");
}

#[test]
fn credentials_of_another_cluster_are_refused_with_one_line() {
    let dir = TempDir::new("foreign");
    let (_head, addr) = start_head(&dir);
    let foreign = foreign_credentials(&dir);

    let status = rayrs(&[
        "status",
        "--address",
        &addr,
        "--credentials",
        &foreign,
        "--dir",
        dir.path(),
    ]);
    let err = one_line_failure(&status);
    assert!(err.contains("do not belong to the same cluster"), "{err}");

    let join = rayrs(&[
        "start",
        "--address",
        &addr,
        "--credentials",
        &foreign,
        "--dir",
        dir.path(),
    ]);
    let err = one_line_failure(&join);
    assert!(err.contains("do not belong to the same cluster"), "{err}");
}

#[test]
fn unreachable_address_fails_with_one_line() {
    let dir = TempDir::new("unreachable");
    let creds = foreign_credentials(&dir);
    // A port nobody listens on: bound and released at once.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    for args in [
        vec!["status", "--address", &addr],
        vec!["list", "nodes", "--address", &addr],
        vec!["start", "--address", &addr],
    ] {
        let mut args = args;
        args.extend(["--credentials", &creds, "--timeout-ms", "1000"]);
        let err = one_line_failure(&rayrs(&args));
        assert!(err.contains("cannot reach the GCS"), "{err}");
    }
}

#[test]
fn wrong_flags_and_missing_credentials_fail_with_one_line() {
    let dir = TempDir::new("flags");
    for args in [
        vec!["start"],
        vec!["start", "--bogus"],
        vec!["start", "--head", "--address", "127.0.0.1:1"],
        vec!["start", "--head", "--port", "seventy"],
        vec!["start", "--address", "no-port-here"],
        vec!["start", "--head", "--resources", "[1, 2]"],
        vec!["start", "--head", "--policies", "no-such-set"],
        vec!["list", "tasks-and-more"],
        vec!["list", "nodes", "--format", "xml"],
        vec!["frobnicate"],
        vec![],
    ] {
        let out = rayrs(&args);
        one_line_failure(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let missing = dir.join("nowhere");
    let out = rayrs(&[
        "status",
        "--address",
        "127.0.0.1:1",
        "--credentials",
        &missing,
    ]);
    let err = one_line_failure(&out);
    assert!(err.contains("no credentials"), "{err}");
    // A directory that exists but holds no credentials.
    let out = rayrs(&[
        "status",
        "--address",
        "127.0.0.1:1",
        "--credentials",
        dir.path(),
    ]);
    let err = one_line_failure(&out);
    assert!(err.contains("credentials"), "{err}");
}

#[test]
fn stop_with_nothing_started_succeeds() {
    let dir = TempDir::new("idle");
    let out = rayrs(&["stop", "--dir", dir.path()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A task that stays RUNNING long enough to be listed.
#[ray_core::remote]
fn sleepy_state_probe(ms: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(ms));
    ms
}

/// `rayrs list WHAT --format json` against `cluster`, run off the async
/// runtime (the driver in this process must keep answering meanwhile).
async fn list_state(cluster: &ray_core::Cluster, what: &'static str) -> Output {
    let address = cluster.address();
    let credentials = cluster.credentials();
    tokio::task::spawn_blocking(move || {
        let credentials = credentials.to_str().expect("utf-8 path").to_owned();
        rayrs(&[
            "list",
            what,
            "--format",
            "json",
            "--address",
            &address,
            "--credentials",
            &credentials,
        ])
    })
    .await
    .expect("rayrs runs")
}

fn json_rows(out: &Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", stderr(out));
    match serde_json::from_slice(&out.stdout).expect("list prints JSON") {
        Value::Array(rows) => rows,
        other => panic!("expected a JSON array, got {other}"),
    }
}

/// Registers a worker of the running job at an address nobody answers on,
/// as a worker that exited without a word would look to the GCS.
async fn register_silent_worker(cluster: &ray_core::Cluster) -> (ray_core::WorkerId, String) {
    use ray_core::cluster::{control_plane_fingerprint, GcsClient};
    use ray_transport::{ClusterCredentials, Endpoint, EndpointConfig, Role};

    let creds = ClusterCredentials::load(&cluster.credentials()).expect("credentials");
    let endpoint = Endpoint::bind(
        "127.0.0.1:0".parse().expect("addr"),
        &creds,
        EndpointConfig::new(Role::Cli, control_plane_fingerprint()),
    )
    .expect("bind");
    let gcs_addr = cluster.address().parse().expect("GCS address");
    let gcs = GcsClient::connect(&endpoint, gcs_addr, Duration::from_secs(10))
        .await
        .expect("connect to the GCS");
    let job = gcs
        .jobs()
        .await
        .expect("jobs")
        .into_iter()
        .find(|j| j.running)
        .expect("the driver's job runs")
        .id;
    let node = gcs.nodes().await.expect("nodes")[0].id;
    // A port nobody listens on: bound and released at once.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let (worker, _config) = gcs
        .register_worker(job, node, address.clone())
        .await
        .expect("register the silent worker");
    (worker, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_and_objects_show_a_running_task_and_a_put_object_of_every_owner() {
    let cluster = ray_core::Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let task = sleepy_state_probe::remote(&ray, 8_000).expect("submit");
    let object = ray.put(vec![7u8; 1 << 20]).await.expect("put 1 MiB");
    let deadline = Instant::now() + DEADLINE;

    // The task is QUEUED until a worker process has started for it (the
    // node fetches this ~100 MB test binary first: seconds on a busy
    // machine); it then sleeps far longer than one poll.
    let running = loop {
        let tasks = json_rows(&list_state(&cluster, "tasks").await);
        let probe = tasks.into_iter().find(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("sleepy_state_probe"))
        });
        if let Some(t) = probe.filter(|t| t["state"] == "RUNNING") {
            break t;
        }
        assert!(Instant::now() < deadline, "the task never showed RUNNING");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(running["node"], "node-1", "{running}");
    assert!(
        running["owner"]
            .as_str()
            .is_some_and(|o| o.starts_with("worker-")),
        "{running}"
    );
    let owner = running["owner"].clone();

    // A worker the GCS knows but that never answers costs one stderr line,
    // not the listing.
    let (silent, silent_addr) = register_silent_worker(&cluster).await;
    let out = list_state(&cluster, "objects").await;
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "stderr: {err}");
    assert!(
        err.starts_with(&format!("rayrs: {silent} at {silent_addr} did not answer")),
        "stderr: {err}"
    );
    let objects = json_rows(&out);
    let id = object.id().to_string();
    let put = objects
        .iter()
        .find(|o| o["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {objects:?}"));
    assert!(
        put["state"] == "STORED" || put["state"] == "INLINE",
        "{put}"
    );
    let bytes = put["bytes"].as_u64().expect("a stored object has a size");
    assert!(
        (1 << 20..(1 << 20) + 4096).contains(&bytes),
        "1 MiB put as {bytes} bytes"
    );
    // The driver owns both the task and the object.
    assert_eq!(put["owner"], owner, "{put}");
    drop(task);
}
