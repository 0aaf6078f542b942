//! The server's bounds and its runtime: the token is checked before
//! anything else on every route and method, heads and bodies over their
//! limits are refused with 400, connections over the cap with 503, every
//! answer carries the same headers, a slow source never holds up the
//! runtime, and dropping the dashboard ends its event streams and closes
//! its port, on its own runtime or the caller's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ray_dashboard::{
    Dashboard, DashboardConfig, JobEntry, Source, SourceError, ViewQuery, ViewsSource,
};
use ray_insight::Views;
use serde_json::{json, Value};

use ray_test_support::http::{exchange, get, post, request};

const TOKEN: &str = "sesame";

fn config() -> DashboardConfig {
    DashboardConfig {
        token: Some(TOKEN.into()),
        ..DashboardConfig::default()
    }
}

/// One finished task `m::work` called by the driver, as job `job-1`.
fn one_task() -> Arc<ViewsSource> {
    ray_test_support::http::one_task_source()
}

fn start() -> Dashboard {
    Dashboard::start(config(), one_task()).expect("the dashboard starts")
}

/// The whole raw response to `raw` (head and body).
fn raw_exchange(dash: &Dashboard, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[test]
fn every_route_and_method_without_the_token_is_refused_before_routing() {
    let dash = start();
    let targets = [
        "/",
        "/index.html",
        "/app.js",
        "/app.css",
        "/api/jobs",
        "/api/stats?job=job-1",
        "/api/view?view=logical",
        "/api/view?view=nope",
        "/api/summary?view=logical",
        "/api/flamediff?before=a+1",
        "/api/events",
        "/api/events?view=flame",
        "/api/nothing",
        "/nothing",
        "/%zz/..",
    ];
    for target in targets {
        for method in ["GET", "POST", "PUT", "DELETE", "OPTIONS"] {
            for token in ["", "token=sesamf", "token=", "token=sesame2"] {
                let sep = if target.contains('?') { '&' } else { '?' };
                let target = if token.is_empty() {
                    target.to_owned()
                } else {
                    format!("{target}{sep}{token}")
                };
                let (status, body) = request(
                    &dash,
                    format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n\r\nx"),
                );
                assert_eq!(status, 401, "{method} {target}: {body}");
                assert!(body.contains("token"), "{method} {target} says why");
            }
        }
        // A wrong bearer token is no better.
        let (status, _) = request(
            &dash,
            format!("GET {target} HTTP/1.1\r\nAuthorization: Bearer sesamf\r\n\r\n"),
        );
        assert_eq!(status, 401, "{target} with a wrong bearer token");
    }
    // With the token, the method is checked next, then the route.
    let (status, _) = request(
        &dash,
        format!("PUT /api/jobs?token={TOKEN} HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(status, 405);
    assert_eq!(get(&dash, &format!("/nothing?token={TOKEN}")).0, 404);
}

#[test]
fn every_answer_says_its_type_and_forbids_caching_and_sniffing() {
    let dash = start();
    for (target, status, kind) in [
        (format!("/?token={TOKEN}"), 200, "text/html"),
        (format!("/app.js?token={TOKEN}"), 200, "text/javascript"),
        (format!("/api/jobs?token={TOKEN}"), 200, "application/json"),
        (
            format!("/api/view?token={TOKEN}&view=nope"),
            400,
            "text/plain",
        ),
        (format!("/nothing?token={TOKEN}"), 404, "text/plain"),
        ("/api/jobs".to_owned(), 401, "text/plain"),
    ] {
        let response = raw_exchange(
            &dash,
            format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
        );
        let (head, body) = response.split_once("\r\n\r\n").expect("a head");
        let head = head.to_ascii_lowercase();
        assert!(
            head.starts_with(&format!("http/1.1 {status} ")),
            "{target}: {head}"
        );
        assert!(head.contains(&format!("content-type: {kind}")), "{head}");
        assert!(head.contains("cache-control: no-store"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert!(head.contains("connection: close"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{target}: the body is whole: {head}"
        );
    }
}

#[test]
fn a_request_head_over_64_kib_is_refused_with_400() {
    let dash = start();
    let with_padding = |pad: usize| {
        format!(
            "GET /api/jobs?token={TOKEN} HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(pad)
        )
    };
    // Just under the limit: served.
    let (status, _) = request(&dash, with_padding(60 * 1024));
    assert_eq!(status, 200);
    // Over it, in a header or in the URL: 400, and the answer arrives
    // (the server reads a little of the rest before closing).
    let response = raw_exchange(&dash, with_padding(70 * 1024).as_bytes());
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(response.contains("too long"), "{response}");
    let long_url = format!(
        "GET /api/jobs?token={TOKEN}&pad={} HTTP/1.1\r\n\r\n",
        "b".repeat(70 * 1024)
    );
    let response = raw_exchange(&dash, long_url.as_bytes());
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    // A head cut short (the client stops sending half-way) is a 400 too.
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET /api/jobs?token={TOKEN} HTTP/1.1\r\nHost: loc").unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
}

#[test]
fn a_flame_baseline_over_16_mib_is_refused_with_400_before_it_is_read() {
    let dash = start();
    let target = format!("/api/flamediff?token={TOKEN}");
    let (status, body) = request(
        &dash,
        format!("POST {target} HTTP/1.1\r\nContent-Length: 16777217\r\n\r\n"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("16777217 bytes"), "{body}");
    // Chunked, with no length said up front: refused once over the cap.
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {target} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let chunk = format!("100000\r\n{}\r\n", "x".repeat(1 << 20));
    for _ in 0..17 {
        if stream.write_all(chunk.as_bytes()).is_err() {
            break; // refused and closed while still sending
        }
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    assert!(
        response.is_empty() || response.starts_with("HTTP/1.1 400"),
        "{response}"
    );
    // Within the cap, the same request is read whole.
    let (status, svg) = post(&dash, &target, b"driver;m::work 5\n");
    assert_eq!(status, 200, "{svg}");
    assert!(svg.contains("<svg"));
}

#[test]
fn connections_over_the_cap_are_refused_with_503() {
    let dash = Dashboard::start(
        DashboardConfig {
            max_connections: 1,
            ..config()
        },
        ViewsSource::new("job-1", Views::default(), None),
    )
    .expect("the dashboard starts");
    // One connection, still sending its head, holds the only place.
    let mut held = TcpStream::connect(dash.local_addr()).unwrap();
    held.write_all(b"GET /api/jobs?token=sesame HTTP/1.1\r\n")
        .unwrap();
    let (status, body) = get(&dash, &format!("/api/jobs?token={TOKEN}"));
    assert_eq!((status, body.as_str()), (503, "too many connections\n"));
    // Once it is served, the place is free again.
    held.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    held.write_all(b"\r\n").unwrap();
    let mut response = Vec::new();
    held.read_to_end(&mut response).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = get(&dash, &format!("/api/jobs?token={TOKEN}"));
        if status == 200 {
            break;
        }
        // The permit goes back just after the response is written.
        assert!(std::time::Instant::now() < deadline, "still {status}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A source whose `view` says it has begun, then waits until `stats` has
/// been called: if it ran on the runtime's thread, the one would keep the
/// other from ever running.
struct Gate {
    began: Mutex<mpsc::Sender<()>>,
    called: Mutex<mpsc::Sender<()>>,
    waited: Mutex<mpsc::Receiver<()>>,
}

impl Source for Gate {
    fn jobs(&self) -> Vec<JobEntry> {
        Vec::new()
    }

    fn stats(&self, _job: Option<&str>) -> Result<Value, SourceError> {
        let _ = self.called.lock().unwrap().send(());
        Ok(json!({ "version": 1 }))
    }

    fn view(&self, _query: &ViewQuery) -> Result<String, SourceError> {
        let _ = self.began.lock().unwrap().send(());
        self.waited
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20))
            .map(|()| "{}".to_owned())
            .map_err(|_| SourceError::Other("stats never ran while this view was rendering".into()))
    }
}

#[test]
fn a_slow_source_does_not_hold_up_the_server() {
    let (called, waited) = mpsc::channel();
    let (began, view_began) = mpsc::channel();
    let gate = Arc::new(Gate {
        began: Mutex::new(began),
        called: Mutex::new(called),
        waited: Mutex::new(waited),
    });
    // Its own runtime has one thread: a view rendered there would block it.
    let dash = Dashboard::start(config(), gate).expect("the dashboard starts");
    let addr = dash.local_addr();
    let view = std::thread::spawn(move || {
        exchange(
            addr,
            format!("GET /api/view?token={TOKEN}&view=logical HTTP/1.1\r\n\r\n"),
        )
    });
    view_began
        .recv_timeout(Duration::from_secs(20))
        .expect("the view is being rendered");
    let (status, _) = get(&dash, &format!("/api/stats?token={TOKEN}"));
    assert_eq!(status, 200);
    let (status, body) = view.join().unwrap();
    assert_eq!(status, 200, "{body}");
}

/// Reads `stream` to its end; `true` if it ended (rather than timing out).
fn ends(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).is_ok()
}

/// An event stream, its head and first message read.
fn events(dash: &Dashboard) -> TcpStream {
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET /api/events?token={TOKEN} HTTP/1.1\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let n = stream.read(&mut buf).expect("an event arrives");
        assert!(n > 0, "the stream ended");
        seen.extend_from_slice(&buf[..n]);
    }
    stream
}

#[test]
fn dropping_the_dashboard_ends_its_event_streams_and_closes_its_port() {
    let dash = start();
    let addr = dash.local_addr();
    let mut stream = events(&dash);
    drop(dash);
    assert!(ends(&mut stream), "the event stream ended");
    assert!(TcpStream::connect(addr).is_err(), "the port is closed");
}

#[test]
fn on_the_callers_runtime_it_serves_and_stops_the_same() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dash = Dashboard::start_on(
        runtime.handle(),
        config(),
        ViewsSource::new("job-1", Views::default(), None),
    )
    .expect("the dashboard starts");
    let (status, jobs) = get(&dash, &format!("/api/jobs?token={TOKEN}"));
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&jobs).unwrap()[0]["job"],
        "job-1"
    );
    assert_eq!(get(&dash, "/api/jobs").0, 401);
    let mut stream = events(&dash);
    drop(dash);
    assert!(ends(&mut stream), "the event stream ended");
    // The runtime outlives the dashboard, and keeps running.
    assert_eq!(runtime.block_on(async { 7 }), 7);
}

/// Started from async code (as an embedded runtime's `init` does), a
/// dashboard that cannot bind is an error, not a panic over a runtime
/// dropped where blocking is not allowed.
#[tokio::test]
async fn a_busy_address_is_an_error_even_from_async_code() {
    let first = start();
    let second = Dashboard::start(
        DashboardConfig {
            bind: first.local_addr(),
            ..config()
        },
        one_task(),
    );
    assert_eq!(
        second.expect_err("the address is taken").kind(),
        std::io::ErrorKind::AddrInUse
    );
    assert_eq!(get(&first, &format!("/api/jobs?token={TOKEN}")).0, 200);
}
