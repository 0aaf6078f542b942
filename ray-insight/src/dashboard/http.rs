//! The dashboard's HTTP/1.1: one request per connection (`Connection:
//! close`), GET only, a bounded request head, a thread per connection up to
//! the configured cap. Small on purpose: it serves one person's browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Shared, ViewQuery, EVENT_EVERY};
use crate::export::{parse_metric, ExportFormat, ViewKind};
use crate::views::{diff_svg, FlameMetric};

/// The page and its assets, compiled in.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The longest request head read (request line and headers).
const MAX_HEAD_BYTES: u64 = 64 * 1024;

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        if shared.open.fetch_add(1, Ordering::AcqRel) >= shared.max_connections {
            shared.open.fetch_sub(1, Ordering::AcqRel);
            let _ = respond(&mut stream, 503, "text/plain", b"too many connections\n");
            continue;
        }
        let worker = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("rayrs-dashboard-conn".into())
            .spawn(move || {
                serve(stream, &worker);
                worker.open.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            shared.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A parsed request: the path and its query parameters, decoded.
struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    bearer: Option<String>,
}

impl Request {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let request = match read_request(&stream) {
        Ok(request) => request,
        Err(why) => {
            let _ = respond(
                &mut stream,
                400,
                "text/plain",
                format!("{why}\n").as_bytes(),
            );
            return;
        }
    };
    if request.method != "GET" {
        let _ = respond(&mut stream, 405, "text/plain", b"only GET is served\n");
        return;
    }
    let token = request.param("token").or(request.bearer.as_deref());
    if !token.is_some_and(|t| same(t.as_bytes(), shared.token.as_bytes())) {
        let _ = respond(
            &mut stream,
            401,
            "text/plain",
            b"a valid token is required: open the URL the dashboard printed\n",
        );
        return;
    }
    if request.path == "/api/events" {
        events(stream, &request, shared);
        return;
    }
    let (status, kind, body) = route(&request, shared);
    let _ = respond(&mut stream, status, kind, body.as_bytes());
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn route(request: &Request, shared: &Shared) -> (u16, &'static str, String) {
    let source = &shared.source;
    let job = request.param("job").filter(|j| !j.is_empty());
    match request.path.as_str() {
        "/" | "/index.html" => (
            200,
            "text/html; charset=utf-8",
            INDEX_HTML.replace("__RAYRS_TOKEN__", &shared.token),
        ),
        "/app.js" => (200, "text/javascript; charset=utf-8", APP_JS.to_owned()),
        "/app.css" => (200, "text/css; charset=utf-8", APP_CSS.to_owned()),
        "/api/jobs" => {
            let jobs: Vec<_> = source
                .jobs()
                .into_iter()
                .map(|j| json!({"job": j.job, "label": j.label, "latest": j.latest}))
                .collect();
            (200, "application/json", json!(jobs).to_string())
        }
        "/api/stats" => match source.stats(job) {
            Ok(stats) => (200, "application/json", stats.to_string()),
            Err(e) => (404, "text/plain", format!("{e}\n")),
        },
        "/api/view" => match view_query(request) {
            Ok(query) => match source.view(&query) {
                Ok(text) => (200, content_type(query.format), text),
                Err(e) => (404, "text/plain", format!("{e}\n")),
            },
            Err(e) => (400, "text/plain", format!("{e}\n")),
        },
        "/api/flamediff" => flame_diff(request, shared),
        _ => (404, "text/plain", "no such page\n".to_owned()),
    }
}

fn content_type(format: ExportFormat) -> &'static str {
    match format {
        ExportFormat::Json | ExportFormat::Chrome => "application/json",
        ExportFormat::Svg => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    }
}

fn view_query(request: &Request) -> Result<ViewQuery, String> {
    let view: ViewKind = request
        .param("view")
        .ok_or("view= is missing")?
        .parse()
        .map_err(|e| format!("{e}"))?;
    let format = match request.param("format") {
        Some(f) => view
            .check(f.parse().map_err(|e| format!("{e}"))?)
            .map_err(|e| format!("{e}"))?,
        None => view.default_format(),
    };
    let at_nanos = match request.param("at").filter(|a| !a.is_empty()) {
        Some(a) => Some(
            a.parse::<u64>()
                .map_err(|_| format!("bad at={a}: nanoseconds"))?,
        ),
        None => None,
    };
    let filter = match request.param("filter").filter(|f| !f.is_empty()) {
        Some(f) => {
            let (k, v) = f
                .split_once('=')
                .ok_or_else(|| format!("bad filter {f:?}: key=value"))?;
            Some((k.to_owned(), v.to_owned()))
        }
        None => None,
    };
    let metric = match request.param("metric").filter(|m| !m.is_empty()) {
        Some(m) => parse_metric(m).map_err(|e| e.to_string())?,
        None => FlameMetric::SelfTime,
    };
    Ok(ViewQuery {
        job: request
            .param("job")
            .filter(|j| !j.is_empty())
            .map(str::to_owned),
        view,
        format,
        at_nanos,
        filter,
        metric,
    })
}

fn flame_diff(request: &Request, shared: &Shared) -> (u16, &'static str, String) {
    let Some(before) = request.param("before") else {
        return (
            400,
            "text/plain",
            "before= (folded stacks) is missing\n".into(),
        );
    };
    let query = match view_query_for_flame(request) {
        Ok(q) => q,
        Err(e) => return (400, "text/plain", format!("{e}\n")),
    };
    let now = match shared.source.view(&query) {
        Ok(now) => now,
        Err(e) => return (404, "text/plain", format!("{e}\n")),
    };
    match diff_svg(before, &now) {
        Ok(svg) => (200, "image/svg+xml", svg),
        Err(e) => (400, "text/plain", format!("{e}\n")),
    }
}

/// A flame query from a diff request (it names no view or format).
fn view_query_for_flame(request: &Request) -> Result<ViewQuery, String> {
    let mut with_view = Request {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        bearer: None,
    };
    with_view
        .query
        .retain(|(k, _)| k != "view" && k != "format");
    with_view.query.push(("view".into(), "flame".into()));
    with_view.query.push(("format".into(), "folded".into()));
    view_query(&with_view)
}

/// Server-sent events: the job's counters every [`EVENT_EVERY`] until the
/// browser goes away or the dashboard stops.
fn events(mut stream: TcpStream, request: &Request, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\nX-Content-Type-Options: nosniff\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let job = request.param("job").filter(|j| !j.is_empty());
    while !shared.stopped.load(Ordering::Acquire) {
        let data = match shared.source.stats(job) {
            Ok(stats) => stats.to_string(),
            Err(e) => json!({ "error": e }).to_string(),
        };
        if stream
            .write_all(format!("data: {data}\n\n").as_bytes())
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
        std::thread::sleep(EVENT_EVERY);
    }
}

fn respond(stream: &mut TcpStream, status: u16, kind: &str, body: &[u8]) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

fn read_request(stream: &TcpStream) -> Result<Request, String> {
    let mut reader = BufReader::new(stream.take(MAX_HEAD_BYTES));
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err("bad request line".into());
    };
    let mut bearer = None;
    loop {
        let mut header = String::new();
        let n = reader
            .read_line(&mut header)
            .map_err(|e| format!("cannot read the headers: {e}"))?;
        if n == 0 {
            return Err("the request head is too long or cut short".into());
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("authorization") {
                bearer = value.trim().strip_prefix("Bearer ").map(str::to_owned);
            }
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Request {
        method: method.to_owned(),
        path: decode(path),
        query: query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect(),
        bearer,
    })
}

/// Percent-decoding, with `+` as a space; invalid escapes are kept as they are.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_handles_escapes_plus_and_bad_escapes() {
        assert_eq!(decode("dp_rank%3D0"), "dp_rank=0");
        assert_eq!(decode("a+b"), "a b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%E2%9C%93"), "✓");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
