//! `rayrs status` and `rayrs list`: the GCS tables, for people and scripts.
//!
//! `list tasks` and `list objects` ask every owner rather than the GCS (see
//! [`crate::owners`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use ray_core::cluster::{control_plane_fingerprint, resources_from_wire, ClusterError, GcsClient};
use ray_core::Quantity;
use ray_proto::wire::{ActorEntry, ActorStatus, JobEntry, NodeEntry, ResourceAmount};
use ray_transport::{Endpoint, EndpointConfig, Role, TransportError};
use serde_json::{json, Value};

use crate::args::{Format, QueryArgs, Table};
use crate::owners::{self, Ask};
use crate::{layout, CliError};

/// One line saying what went wrong reaching the GCS, and what to do.
pub fn describe(e: ClusterError, credentials: Option<&Path>, dir: &Path) -> CliError {
    let creds = credentials.map_or_else(|| layout::credentials_dir(dir), Path::to_owned);
    match e {
        ClusterError::Transport { addr, source } if source.is_tls_rejection() => {
            CliError::failed(format!(
                "the GCS at {addr} and the credentials in {} do not belong to the same cluster \
                 (TLS handshake rejected: {source})",
                creds.display()
            ))
        }
        ClusterError::Transport {
            addr,
            source: source @ TransportError::HandshakeTimeout { .. },
        } => CliError::failed(format!("cannot reach the GCS at {addr}: {source}")),
        ClusterError::Timeout { addr, timeout } => CliError::failed(format!(
            "cannot reach the GCS at {addr}: no answer within {timeout:?}"
        )),
        other => CliError::failed(other),
    }
}

/// Binds a CLI endpoint and connects it to the GCS; the endpoint can then
/// reach other cluster processes too.
pub(crate) async fn connect(args: &QueryArgs) -> Result<(Endpoint, GcsClient), CliError> {
    let addr = layout::gcs_address(args.address, &args.dir)?;
    let creds = layout::load_credentials(args.credentials.as_deref(), &args.dir)?;
    let mut config = EndpointConfig::new(Role::Cli, control_plane_fingerprint());
    config.transport.handshake_timeout = args.timeout;
    let local = SocketAddr::new(
        if addr.is_ipv4() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        },
        0,
    );
    let endpoint = Endpoint::bind(local, &creds, config).map_err(CliError::failed)?;
    let client = GcsClient::connect(&endpoint, addr, args.timeout)
        .await
        .map_err(|e| describe(e, args.credentials.as_deref(), &args.dir))?;
    Ok((endpoint, client))
}

/// Prints nodes, then job and actor counts.
pub async fn status(args: QueryArgs) -> Result<(), CliError> {
    let (_endpoint, client) = connect(&args).await?;
    let fail = |e| describe(e, args.credentials.as_deref(), &args.dir);
    let nodes = client.nodes().await.map_err(fail)?;
    let jobs = client.jobs().await.map_err(fail)?;
    let actors = client.actors().await.map_err(fail)?;
    let alive = nodes.iter().filter(|n| n.alive).count();
    crate::out!("GCS {}", client.addr());
    crate::out!(
        "Nodes: {} ({alive} alive, {} dead)",
        nodes.len(),
        nodes.len() - alive
    );
    for n in &nodes {
        crate::out!(
            "  {:<10} {:<22} {:<6} {}",
            n.id.to_string(),
            n.address,
            state(n),
            usage_text(n)
        );
    }
    let running = jobs.iter().filter(|j| j.running).count();
    crate::out!("Jobs: {} ({running} running)", jobs.len());
    let live = actors
        .iter()
        .filter(|a| !matches!(a.status, ActorStatus::Dead { .. }))
        .count();
    crate::out!("Actors: {} ({live} alive)", actors.len());
    Ok(())
}

/// Prints one table.
pub async fn list(args: QueryArgs, table: Table, format: Format) -> Result<(), CliError> {
    let (endpoint, client) = connect(&args).await?;
    let fail = |e| describe(e, args.credentials.as_deref(), &args.dir);
    let (rows, json): (Vec<String>, Vec<Value>) = match table {
        Table::Nodes => {
            let nodes = client.nodes().await.map_err(fail)?;
            let lines = nodes
                .iter()
                .map(|n| {
                    let cause = n.death_cause.as_deref().map(|c| format!(" ({c})"));
                    format!(
                        "{:<10} {:<6} {:<22} {}{}",
                        n.id.to_string(),
                        state(n),
                        n.address,
                        resources_text(n),
                        cause.unwrap_or_default()
                    )
                })
                .collect();
            (lines, nodes.iter().map(node_json).collect())
        }
        Table::Jobs => {
            let jobs = client.jobs().await.map_err(fail)?;
            let lines = jobs
                .iter()
                .map(|j| format!("{:<10} {:<9} {}", j.id.to_string(), job_state(j), j.driver))
                .collect();
            (lines, jobs.iter().map(job_json).collect())
        }
        Table::Actors => {
            let actors = client.actors().await.map_err(fail)?;
            let lines = actors
                .iter()
                .map(|a| {
                    format!(
                        "{:<16} {:<24} {:<16} {}",
                        a.id.to_string(),
                        actor_state(&a.status),
                        a.class_name,
                        a.name.as_deref().unwrap_or("-")
                    )
                })
                .collect();
            (lines, actors.iter().map(actor_json).collect())
        }
        Table::Tasks => owners::collect(&endpoint, &client, Ask::Tasks, args.timeout)
            .await
            .map_err(fail)?,
        Table::Objects => owners::collect(&endpoint, &client, Ask::Objects, args.timeout)
            .await
            .map_err(fail)?,
    };
    match format {
        Format::Json => crate::out!("{}", Value::Array(json)),
        Format::Table => rows.iter().for_each(|r| crate::out!("{r}")),
    }
    Ok(())
}

fn state(n: &NodeEntry) -> &'static str {
    if n.alive {
        "alive"
    } else {
        "dead"
    }
}

fn job_state(j: &JobEntry) -> &'static str {
    if j.running {
        "running"
    } else {
        "finished"
    }
}

fn actor_state(s: &ActorStatus) -> String {
    match s {
        ActorStatus::PendingCreation => "pending".into(),
        ActorStatus::Alive { node } => format!("alive on {node}"),
        ActorStatus::Restarting { attempt } => format!("restarting ({attempt})"),
        ActorStatus::Dead { cause } => format!("dead ({cause})"),
    }
}

fn resources_text(n: &NodeEntry) -> String {
    resources_from_wire(&n.resources).to_string()
}

/// `CPU 1.5/4, GPU 0/1`: each resource the node has, used over total, as
/// the node last reported (0 used before its first report). A dead node
/// uses nothing: its total alone (`CPU 4`), not what it held when it died.
fn usage_text(n: &NodeEntry) -> String {
    if !n.alive {
        let total = resources_from_wire(&n.resources);
        return if total.is_empty() {
            "no resources".to_owned()
        } else {
            total
                .iter()
                .map(|(name, total)| format!("{name} {total}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
    }
    let used = resources_from_wire(&n.used);
    let parts: Vec<String> = resources_from_wire(&n.resources)
        .iter()
        .map(|(name, total)| format!("{name} {}/{total}", used.get(name)))
        .collect();
    if parts.is_empty() {
        "no resources".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `{"CPU": 1.5, …}`: resource amounts as a JSON object of numbers.
pub fn amounts_json(amounts: &[ResourceAmount]) -> serde_json::Map<String, Value> {
    resources_from_wire(amounts)
        .iter()
        .map(|(name, q)| (name.to_owned(), amount(q)))
        .collect()
}

fn amount(q: Quantity) -> Value {
    json!(q.to_f64())
}

fn node_json(n: &NodeEntry) -> Value {
    let labels: serde_json::Map<String, Value> = n
        .labels
        .iter()
        .map(|l| (l.key.clone(), json!(l.value)))
        .collect();
    json!({
        "id": n.id.0,
        "name": n.id.to_string(),
        "address": n.address,
        "state": state(n),
        "death_cause": n.death_cause,
        "resources": amounts_json(&n.resources),
        "used": amounts_json(&n.used),
        "load_version": n.version,
        "labels": labels,
    })
}

fn job_json(j: &JobEntry) -> Value {
    json!({ "id": j.id.0, "driver": j.driver, "state": job_state(j) })
}

fn actor_json(a: &ActorEntry) -> Value {
    json!({
        "id": a.id.to_string(),
        "class": a.class_name,
        "name": a.name,
        "namespace": a.namespace,
        "job": a.job.0,
        "state": actor_state(&a.status),
    })
}
