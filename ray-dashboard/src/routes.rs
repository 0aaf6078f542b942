//! What the server answers: the token check, then the page, the API and
//! the event stream.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use ray_insight::export::ExportFormat;
use ray_insight::views::diff_svg;
use serde_json::json;
use tokio::time::timeout;

use crate::conn::{DISCARD_BYTES, READ_TIMEOUT};
use crate::query::{flame_query, summary_query, view_query, Target};
use crate::server::Shared;
use crate::{events, Source};

/// The page and its assets, compiled in.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The largest request body read (a flame graph baseline posted for a diff).
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// A response body: whole, or an event stream.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// An answer before it becomes a response: status, content type, body.
type Answer = (StatusCode, &'static str, String);

/// A plain-text answer saying why a request failed.
fn failed(status: StatusCode, why: impl std::fmt::Display) -> Answer {
    (status, "text/plain", format!("{why}\n"))
}

/// Why a request body was not read whole (answered 400).
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// Its announced length is over [`MAX_BODY_BYTES`].
    #[error("the request body is {length} bytes; at most {MAX_BODY_BYTES} are read")]
    Announced {
        /// The announced length.
        length: u64,
    },
    /// More than [`MAX_BODY_BYTES`] arrived.
    #[error("the request body is over {MAX_BODY_BYTES} bytes, the most that is read")]
    Over,
    /// Nothing arrived for [`READ_TIMEOUT`].
    #[error("the request body stopped arriving")]
    Stalled,
    /// The connection failed mid-body.
    #[error("the request body is cut short: {0}")]
    CutShort(#[source] hyper::Error),
}

/// Answers one request. Nothing is routed, and no body is read, before the
/// token is checked.
pub(crate) async fn handle(
    request: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<Body>, Infallible> {
    let target = Target::parse(request.uri().path(), request.uri().query());
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("Bearer "));
    let token = target.param("token").or(bearer);
    if !token.is_some_and(|t| same(t.as_bytes(), shared.token.as_bytes())) {
        discard(request.into_body()).await;
        return Ok(plain(
            StatusCode::UNAUTHORIZED,
            "a valid token is required: open the URL the dashboard printed\n",
        ));
    }
    let posted_diff = request.method() == Method::POST && target.path == "/api/flamediff";
    if request.method() != Method::GET && !posted_diff {
        discard(request.into_body()).await;
        return Ok(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served (and POST to /api/flamediff)\n",
        ));
    }
    let body = if posted_diff {
        match read_body(request).await {
            Ok(body) => Some(body),
            Err(why) => return Ok(plain(StatusCode::BAD_REQUEST, &format!("{why}\n"))),
        }
    } else {
        discard(request.into_body()).await;
        None
    };
    let (status, kind, text) = match target.path.as_str() {
        "/" | "/index.html" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            INDEX_HTML.replace("__RAYRS_TOKEN__", &shared.token),
        ),
        "/app.js" => (
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            APP_JS.into(),
        ),
        "/app.css" => (StatusCode::OK, "text/css; charset=utf-8", APP_CSS.into()),
        "/api/events" => return Ok(events(&target, &shared)),
        path if path.starts_with("/api/") => {
            // The source may render or replay: off the runtime's threads.
            let source = shared.source.clone();
            let routed =
                tokio::task::spawn_blocking(move || api(&target, body.as_deref(), &*source)).await;
            match routed {
                Ok(answer) => answer,
                Err(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "the view could not be rendered (see the server's log)\n".into(),
                ),
            }
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", "no such page\n".into()),
    };
    Ok(respond(status, kind, Full::new(Bytes::from(text)).boxed()))
}

/// An `/api/` request other than the event stream, answered from `source`
/// (blocking).
fn api(target: &Target, body: Option<&[u8]>, source: &dyn Source) -> Answer {
    match target.path.as_str() {
        "/api/jobs" => {
            let jobs: Vec<_> = source
                .jobs()
                .into_iter()
                .map(|j| json!({"job": j.job, "label": j.label, "latest": j.latest}))
                .collect();
            (StatusCode::OK, "application/json", json!(jobs).to_string())
        }
        "/api/stats" => match source.stats(target.job()) {
            Ok(stats) => (StatusCode::OK, "application/json", stats.to_string()),
            Err(e) => failed(StatusCode::NOT_FOUND, e),
        },
        "/api/view" => match view_query(target) {
            Ok(query) => match source.view(&query) {
                Ok(text) => (StatusCode::OK, content_type(query.format), text),
                Err(e) => failed(StatusCode::NOT_FOUND, e),
            },
            Err(e) => failed(StatusCode::BAD_REQUEST, e),
        },
        "/api/summary" => match summary_query(target) {
            Ok(query) => match source.view(&query) {
                Ok(text) => (StatusCode::OK, "application/json", text),
                Err(e) => failed(StatusCode::NOT_FOUND, e),
            },
            Err(e) => failed(StatusCode::BAD_REQUEST, e),
        },
        "/api/flamediff" => flame_diff(target, body, source),
        _ => (StatusCode::NOT_FOUND, "text/plain", "no such page\n".into()),
    }
}

fn content_type(format: ExportFormat) -> &'static str {
    match format {
        ExportFormat::Json | ExportFormat::Chrome => "application/json",
        ExportFormat::Svg => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    }
}

/// A differential flame graph: the baseline POSTed (`body`) or in
/// `before=`, against the job's flame graph now.
fn flame_diff(target: &Target, body: Option<&[u8]>, source: &dyn Source) -> Answer {
    let before = match body {
        Some(body) => match std::str::from_utf8(body) {
            Ok(body) => body,
            Err(_) => return failed(StatusCode::BAD_REQUEST, "the baseline is not UTF-8"),
        },
        None => match target.param("before") {
            Some(before) => before,
            None => {
                return failed(
                    StatusCode::BAD_REQUEST,
                    "the baseline (folded stacks) is missing: POST it, or pass before=",
                )
            }
        },
    };
    let query = match flame_query(target) {
        Ok(q) => q,
        Err(e) => return failed(StatusCode::BAD_REQUEST, e),
    };
    let now = match source.view(&query) {
        Ok(now) => now,
        Err(e) => return failed(StatusCode::NOT_FOUND, e),
    };
    match diff_svg(before, &now) {
        Ok(svg) => (StatusCode::OK, "image/svg+xml", svg),
        Err(e) => failed(StatusCode::BAD_REQUEST, e),
    }
}

/// The event stream's response: 200 and a body that the events task
/// fills, or 400 for a view that cannot be summarized.
fn events(target: &Target, shared: &Arc<Shared>) -> Response<Body> {
    let view = match target.param("view").filter(|v| !v.is_empty()) {
        None => None,
        Some(_) => match summary_query(target) {
            Ok(query) => Some(query),
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("{e}\n")),
        },
    };
    let body = events::start(shared, target.job().map(str::to_owned), view);
    respond(StatusCode::OK, "text/event-stream", body.boxed())
}

/// A request body, whole: at most [`MAX_BODY_BYTES`], each part within
/// [`READ_TIMEOUT`] of the last.
async fn read_body(request: Request<Incoming>) -> Result<Vec<u8>, BodyError> {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = length.filter(|&l| l > MAX_BODY_BYTES) {
        return Err(BodyError::Announced { length });
    }
    let mut body = request.into_body();
    let mut bytes = Vec::with_capacity(length.unwrap_or(0) as usize);
    loop {
        let frame = match timeout(READ_TIMEOUT, body.frame()).await {
            Err(_) => return Err(BodyError::Stalled),
            Ok(None) => return Ok(bytes),
            Ok(Some(Err(e))) => return Err(BodyError::CutShort(e)),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if (bytes.len() + data.len()) as u64 > MAX_BODY_BYTES {
                return Err(BodyError::Over);
            }
            bytes.extend_from_slice(&data);
        }
    }
}

/// Reads and drops up to [`DISCARD_BYTES`] of a body that will not be used,
/// so that the answer reaches the client rather than a reset for unread
/// data.
async fn discard(mut body: Incoming) {
    let mut left = DISCARD_BYTES;
    while left > 0 {
        match timeout(READ_TIMEOUT, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, Bytes::len);
                left = left.saturating_sub(n);
            }
            _ => return,
        }
    }
}

/// A plain-text answer.
fn plain(status: StatusCode, text: &str) -> Response<Body> {
    respond(
        status,
        "text/plain",
        Full::new(Bytes::copy_from_slice(text.as_bytes())).boxed(),
    )
}

/// A response with the headers every answer carries.
fn respond(status: StatusCode, kind: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
