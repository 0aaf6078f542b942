//! The dashboard's HTTP/1.1: one request per connection (`Connection:
//! close`), GET (and POST for a flame graph diff's baseline), a bounded
//! request head and body, a thread per connection up to
//! the configured cap. Small on purpose: it serves one person's browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{summary, Shared, SummaryParams, ViewQuery, EVENT_EVERY};
use ray_insight::export::{parse_metric, ExportFormat, ViewKind};
use ray_insight::views::{diff_svg, FlameMetric};

/// The page and its assets, compiled in.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The longest request head read (request line and headers).
const MAX_HEAD_BYTES: u64 = 64 * 1024;

/// The largest request body read (a flame graph baseline posted for a diff).
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// A live summary is rebuilt no sooner than this many times its last build
/// time (and at most every [`EVENT_EVERY`]).
const VIEW_COST_SHARE: u32 = 4;

/// The most of a refused request's body read (and dropped) before answering.
const DISCARD_BYTES: u64 = 256 * 1024;

/// How long one write of an event may block before the stream is dropped.
const SSE_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The body (a POST's; empty for a GET).
    body: Vec<u8>,
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
    // A body is read only for a request that may have one and carries the
    // token: nobody else can make the server buffer it.
    let wants_body = |r: &Request| {
        r.method == "POST"
            && r.path == "/api/flamediff"
            && r.param("token")
                .or(r.bearer.as_deref())
                .is_some_and(|t| same(t.as_bytes(), shared.token.as_bytes()))
    };
    let request = match read_request(&stream, &wants_body) {
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
    let posted_diff = request.method == "POST" && request.path == "/api/flamediff";
    if request.method != "GET" && !posted_diff {
        let _ = respond(
            &mut stream,
            405,
            "text/plain",
            b"only GET is served (and POST to /api/flamediff)\n",
        );
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
        "/api/summary" => match summary_query(request) {
            Ok(query) => match source.view(&query) {
                Ok(text) => (200, "application/json", text),
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
        summary: None,
    })
}

/// A summary query: a view query (its format is ignored) with the
/// summary's own parameters.
fn summary_query(request: &Request) -> Result<ViewQuery, String> {
    let nanos = |name: &str| -> Result<Option<u64>, String> {
        match request.param(name).filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("bad {name}={v}: nanoseconds")),
            None => Ok(None),
        }
    };
    let params = SummaryParams {
        expand: request
            .param("expand")
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        from_nanos: nanos("from")?,
        to_nanos: nanos("to")?,
    };
    if let (Some(from), Some(to)) = (params.from_nanos, params.to_nanos) {
        if from >= to {
            return Err(format!(
                "bad window from={from} to={to}: from must be before to"
            ));
        }
    }
    let mut query = view_query(request)?;
    if query.view == ViewKind::Flame {
        return Err("the flame graph has no summary: ask /api/view for its svg".into());
    }
    query.summary = Some(params);
    Ok(query)
}

fn flame_diff(request: &Request, shared: &Shared) -> (u16, &'static str, String) {
    let before = if request.method == "POST" {
        match std::str::from_utf8(&request.body) {
            Ok(body) => body,
            Err(_) => return (400, "text/plain", "the baseline is not UTF-8\n".into()),
        }
    } else {
        match request.param("before") {
            Some(before) => before,
            None => {
                return (
                    400,
                    "text/plain",
                    "the baseline (folded stacks) is missing: POST it, or pass before=\n".into(),
                )
            }
        }
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
        body: Vec::new(),
    };
    with_view
        .query
        .retain(|(k, _)| k != "view" && k != "format");
    with_view.query.push(("view".into(), "flame".into()));
    with_view.query.push(("format".into(), "folded".into()));
    view_query(&with_view)
}

/// Server-sent events every [`EVENT_EVERY`] until the browser goes away or
/// the dashboard stops: `{"stats": COUNTERS}`, and, when a view is asked for
/// (the parameters of `/api/summary`), its summary once (`"full"`) and
/// then, whenever records arrived, only what changed (`"delta"`, see
/// [`summary::diff`]). A view that cannot be summarized is said once
/// (`"error"`) and the counters go on.
fn events(mut stream: TcpStream, request: &Request, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\nX-Content-Type-Options: nosniff\r\n\r\n";
    let job = request.param("job").filter(|j| !j.is_empty());
    let subscription = match request.param("view").filter(|v| !v.is_empty()) {
        None => None,
        Some(_) => match summary_query(request) {
            Ok(query) => Some(query),
            Err(e) => {
                let _ = respond(&mut stream, 400, "text/plain", format!("{e}\n").as_bytes());
                return;
            }
        },
    };
    // A browser that stops reading must not hold this thread forever.
    let _ = stream.set_write_timeout(Some(SSE_WRITE_TIMEOUT));
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let mut shown: Option<serde_json::Value> = None;
    let mut shown_version: Option<serde_json::Value> = None;
    let mut failed = false;
    // A summary that is slow to build (a large job's logical graph takes
    // about a second) is rebuilt at most every fourth of the time, so an
    // open tab keeps at most a quarter of a core busy.
    let mut next_view = Instant::now();
    while !shared.stopped.load(Ordering::Acquire) {
        let mut message = match shared.source.stats(job) {
            Ok(stats) => json!({ "stats": stats }),
            Err(e) => json!({ "error": e }),
        };
        let version = message["stats"].get("version").cloned();
        if let (Some(query), Some(version)) = (&subscription, version) {
            if shown_version.as_ref() != Some(&version) && !failed && Instant::now() >= next_view {
                let began = Instant::now();
                let summary = shared.source.view(query).and_then(|text| {
                    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
                });
                next_view = Instant::now() + (began.elapsed() * VIEW_COST_SHARE).max(EVENT_EVERY);
                match summary {
                    Ok(now) => {
                        match &shown {
                            None => message["full"] = now.clone(),
                            Some(before) => {
                                if let Some(delta) = summary::diff(before, &now) {
                                    message["delta"] = delta;
                                }
                            }
                        }
                        shown = Some(now);
                        shown_version = Some(version);
                    }
                    Err(e) => {
                        failed = true;
                        message["error"] = json!(e);
                    }
                }
            }
        }
        if stream
            .write_all(format!("data: {message}\n\n").as_bytes())
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

fn read_request(
    stream: &TcpStream,
    wants_body: &dyn Fn(&Request) -> bool,
) -> Result<Request, String> {
    let mut reader = BufReader::new(stream);
    let mut head_left = MAX_HEAD_BYTES;
    // One line of the head, never reading past what the head may still take.
    let mut next_line = |reader: &mut BufReader<&TcpStream>| -> Result<String, String> {
        let mut line = String::new();
        let n = reader
            .by_ref()
            .take(head_left)
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the request: {e}"))?;
        head_left -= n as u64;
        if n == 0 || !line.ends_with('\n') {
            return Err("the request head is too long or cut short".into());
        }
        Ok(line)
    };
    let line = next_line(&mut reader)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err("bad request line".into());
    };
    let mut bearer = None;
    let mut length: u64 = 0;
    loop {
        let header = next_line(&mut reader)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let name = name.trim();
            if name.eq_ignore_ascii_case("authorization") {
                bearer = value.trim().strip_prefix("Bearer ").map(str::to_owned);
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad Content-Length {:?}", value.trim()))?;
            }
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut request = Request {
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
        body: Vec::new(),
    };
    if length == 0 {
        return Ok(request);
    }
    if !wants_body(&request) {
        // Refused: a small body is read and dropped, so that the answer
        // reaches the client rather than a reset for unread data.
        let _ = std::io::copy(
            &mut reader.take(length.min(DISCARD_BYTES)),
            &mut std::io::sink(),
        );
        return Ok(request);
    }
    if length > MAX_BODY_BYTES {
        return Err(format!(
            "the request body is {length} bytes; at most {MAX_BODY_BYTES} are read"
        ));
    }
    let mut body = Vec::with_capacity(length as usize);
    reader
        .take(length)
        .read_to_end(&mut body)
        .map_err(|e| format!("cannot read the request body: {e}"))?;
    if body.len() as u64 != length {
        return Err("the request body is cut short".into());
    }
    request.body = body;
    Ok(request)
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
                let pair = &bytes[i + 1..i + 3];
                // Two hex digits exactly (from_str_radix would take "+1").
                let hex = pair
                    .iter()
                    .all(u8::is_ascii_hexdigit)
                    .then(|| std::str::from_utf8(pair).ok())
                    .flatten()
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
        // A sign is not a hex digit: `%` stays, `+` is a space as ever.
        assert_eq!(decode("%+1x"), "% 1x");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
