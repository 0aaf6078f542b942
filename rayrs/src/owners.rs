//! `rayrs list tasks` and `rayrs list objects`: the state API, asked of
//! every owner.
//!
//! No process knows every task or object: each driver and worker knows the
//! ones it owns. So the GCS says who the owners are (the workers and drivers
//! of running jobs), every owner is asked at once, each within a short
//! timeout, and the answers are put together. An owner that does not answer
//! (it exited, or is stuck) costs one line on stderr, not the command.

use std::net::SocketAddr;
use std::time::Duration;

use ray_core::cluster::GcsClient;
use ray_proto::wire::{
    Call, Envelope, ListObjects, ListTasks, Message, ObjectRow, Objects, TaskRow, Tasks,
    WorkerEntry,
};
use ray_transport::{CloseCode, Endpoint, TransportError};
use serde_json::{json, Value};

use crate::query::amounts_json;

/// The longest one owner may take to connect and answer; a smaller
/// `--timeout-ms` bounds it further.
pub const OWNER_TIMEOUT: Duration = Duration::from_secs(2);

/// Why one owner gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// The GCS holds an address that is not `host:port`.
    #[error("its address is not a socket address")]
    BadAddress,
    /// Connecting and answering took longer than allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection or the request failed.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// It answered with an error.
    #[error("it refused: {reason}")]
    Refused {
        /// Its reason.
        reason: String,
    },
    /// It answered something that does not answer the request.
    #[error("it answered {reply} to {request}")]
    UnexpectedReply {
        /// The request's kind.
        request: &'static str,
        /// The reply's kind.
        reply: String,
    },
}

/// What one owner reports.
enum Report {
    Tasks(Vec<TaskRow>),
    Objects(Vec<ObjectRow>),
}

/// Which state request to send.
#[derive(Debug, Clone, Copy)]
pub enum Ask {
    /// `ListTasks`.
    Tasks,
    /// `ListObjects`.
    Objects,
}

/// The rows of every owner that answered `ask`, as table lines and JSON
/// values; each owner that did not answer is reported on stderr.
///
/// # Errors
///
/// Only what asking the GCS for the owners returns; owners that fail are
/// not errors.
pub async fn collect(
    endpoint: &Endpoint,
    gcs: &GcsClient,
    ask: Ask,
    timeout: Duration,
) -> Result<(Vec<String>, Vec<Value>), ray_core::cluster::ClusterError> {
    let owners = gcs.workers().await?;
    let timeout = timeout.min(OWNER_TIMEOUT);
    let answers = futures::future::join_all(
        owners
            .iter()
            .map(|owner| ask_owner(endpoint, owner, ask, timeout)),
    )
    .await;
    let mut lines = Vec::new();
    let mut values = Vec::new();
    for (owner, answer) in owners.iter().zip(answers) {
        match answer {
            Ok(Report::Tasks(mut tasks)) => {
                tasks.sort_by_key(|t| t.task);
                lines.extend(tasks.iter().map(|t| task_line(t, owner)));
                values.extend(tasks.iter().map(|t| task_json(t, owner)));
            }
            Ok(Report::Objects(mut objects)) => {
                objects.sort_by_key(|o| o.object);
                lines.extend(objects.iter().map(|o| object_line(o, owner)));
                values.extend(objects.iter().map(|o| object_json(o, owner)));
            }
            Err(e) => {
                let line = format!(
                    "rayrs: {} at {} did not answer: {e}",
                    owner.worker, owner.address
                );
                eprintln!("{}", line.replace(['\n', '\r'], " "));
            }
        }
    }
    Ok((lines, values))
}

/// Connects to `owner`, sends `ask` on one stream and reads its one reply,
/// all within `timeout`.
async fn ask_owner(
    endpoint: &Endpoint,
    owner: &WorkerEntry,
    ask: Ask,
    timeout: Duration,
) -> Result<Report, OwnerError> {
    let addr: SocketAddr = owner.address.parse().map_err(|_| OwnerError::BadAddress)?;
    let exchange = async {
        let conn = endpoint.connect(addr).await?;
        let reply = match ask {
            Ask::Tasks => call(&conn, ListTasks).await.map(|r| r.map(Report::from)),
            Ask::Objects => call(&conn, ListObjects).await.map(|r| r.map(Report::from)),
        };
        conn.close(CloseCode::Normal, "state query done");
        reply
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| OwnerError::Timeout(timeout))??
}

/// Sends `request` on one stream of `conn` and types its one reply:
/// [`OwnerError::Refused`] for an error, [`OwnerError::UnexpectedReply`]
/// for a reply of another kind.
async fn call<C: Call>(
    conn: &ray_transport::Connection,
    request: C,
) -> Result<Result<C::Reply, OwnerError>, TransportError> {
    let request: Message = request.into();
    let kind = request.kind();
    let reply = conn.request(&Envelope::new(request)).await?;
    Ok(C::reply(reply.body).map_err(|other| match other {
        Message::Error { reason } => OwnerError::Refused { reason },
        other => OwnerError::UnexpectedReply {
            request: kind,
            reply: other.kind().to_owned(),
        },
    }))
}

impl From<Tasks> for Report {
    fn from(reply: Tasks) -> Self {
        Report::Tasks(reply.tasks)
    }
}

impl From<Objects> for Report {
    fn from(reply: Objects) -> Self {
        Report::Objects(reply.objects)
    }
}

fn task_line(t: &TaskRow, owner: &WorkerEntry) -> String {
    format!(
        "{:<20} {:<32} {:<8} {:<10} {}",
        t.task.to_string(),
        t.name,
        t.state,
        t.node.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        owner.worker
    )
}

fn task_json(t: &TaskRow, owner: &WorkerEntry) -> Value {
    json!({
        "id": t.task.to_string(),
        "name": t.name,
        "state": t.state,
        "node": t.node.map(|n| n.to_string()),
        "resources": amounts_json(&t.resources),
        "owner": owner.worker.to_string(),
        "owner_address": owner.address,
        "job": owner.job.0,
    })
}

fn object_line(o: &ObjectRow, owner: &WorkerEntry) -> String {
    format!(
        "{:<20} {:<8} {:>10} {}",
        o.object.to_string(),
        o.state,
        o.bytes.map_or_else(|| "-".to_owned(), size_text),
        owner.worker
    )
}

fn object_json(o: &ObjectRow, owner: &WorkerEntry) -> Value {
    json!({
        "id": o.object.to_string(),
        "state": o.state,
        "bytes": o.bytes,
        "owner": owner.worker.to_string(),
        "owner_address": owner.address,
        "job": owner.job.0,
    })
}

/// `512 B`, `1.5 KiB`, `1.0 MiB`, …: a size for a person.
fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size_text(0), "0 B");
        assert_eq!(size_text(1023), "1023 B");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(1 << 20), "1.0 MiB");
        assert_eq!(size_text(3 << 30), "3.0 GiB");
    }
}
