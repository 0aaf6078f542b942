//! A raw HTTP/1.1 GET against a dashboard, one request per connection, as
//! the server serves them (`Connection: close`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET target` on `url`'s host: the status and the body.
pub fn get(url: &str, target: &str) -> (u16, String) {
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http URL");
    let mut stream = TcpStream::connect(host).expect("the dashboard listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
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
