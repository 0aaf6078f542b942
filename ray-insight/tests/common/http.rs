//! Raw HTTP/1.1 exchanges with a [`Dashboard`], one request per
//! connection, as the server serves them (`Connection: close`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ray_insight::dashboard::Dashboard;

/// One raw HTTP exchange: the status code and the body.
pub fn request(dash: &Dashboard, raw: impl AsRef<[u8]>) -> (u16, String) {
    let mut stream = TcpStream::connect(dash.local_addr()).expect("connects");
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

/// `GET target`.
pub fn get(dash: &Dashboard, target: &str) -> (u16, String) {
    request(
        dash,
        format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
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
