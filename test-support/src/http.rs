//! Raw HTTP/1.1 exchanges with a dashboard, one request per connection, as
//! the server serves them (`Connection: close`): with a [`Dashboard`]
//! handle (ray-dashboard's tests), or by URL (ray-core's and rayrs's).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use ray_dashboard::Dashboard;

/// One raw HTTP exchange with the server at `addr`: the status code and
/// the body.
pub fn exchange(addr: impl ToSocketAddrs, raw: impl AsRef<[u8]>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the dashboard listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(raw.as_ref()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    (status, body)
}

/// One raw HTTP exchange with `dash`.
pub fn request(dash: &Dashboard, raw: impl AsRef<[u8]>) -> (u16, String) {
    exchange(dash.local_addr(), raw)
}

/// `GET target`.
pub fn get(dash: &Dashboard, target: &str) -> (u16, String) {
    request(
        dash,
        format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    )
}

/// `GET target` on the host of `url` (`http://host:port/...`).
pub fn get_url(url: &str, target: &str) -> (u16, String) {
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http URL");
    exchange(
        host,
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    )
}

/// `POST target` with `body` (and its `Content-Length`).
pub fn post(dash: &Dashboard, target: &str, body: &[u8]) -> (u16, String) {
    let mut raw = format!(
        "POST {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    request(dash, raw)
}

/// A dashboard source holding one finished task `m::work` called by the
/// driver, as job `job-1`: the smallest job every view can show.
pub fn one_task_source() -> std::sync::Arc<ray_dashboard::ViewsSource> {
    use ray_insight::{Fields, Record, RecordKind, Sink, Views};
    let record = |kind, at_nanos, fields: &[(&'static str, &str)]| Record {
        kind,
        span: 1,
        parent: 0,
        name: "task.run",
        target: "ray::task",
        at_nanos,
        thread: 0,
        fields: Fields::from_strs(fields),
    };
    let mut views = Views::default();
    views.accept(&[
        record(
            RecordKind::SpanNew,
            1_000,
            &[("task_id", "task-1.1"), ("function", "m::work")],
        ),
        record(RecordKind::SpanClose, 5_000, &[]),
    ]);
    ray_dashboard::ViewsSource::new("job-1", views, None)
}
