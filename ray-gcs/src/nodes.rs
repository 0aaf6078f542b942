//! The node table and node health.
//!
//! A node registers once, then heartbeats. [`Gcs::check_health`] declares dead
//! every alive node whose last heartbeat is older than the
//! [`HealthConfig::timeout`]; death is final (a restarted node registers under
//! a new id) and fails the actors the node hosted.
//!
//! Heartbeat times are kept in memory only, not written to storage: they are
//! on the clock of the process that received them, and writing one row per
//! heartbeat would dominate the storage traffic. A recovered GCS gives every
//! alive node a full timeout from the recovery time to heartbeat again.

use std::collections::BTreeMap;
use std::time::Duration;

use ray_proto::{ActorId, NodeId};
use ray_sched::{Quantity, ResourceSet};

use crate::codec::{key_array, DecodeError, Decoder, Encoder};
use crate::error::GcsError;
use crate::pubsub::{Channel, GcsEvent};
use crate::storage::{Storage, Table};
use crate::Gcs;

const ROW_VERSION: u8 = 1;

/// What a node tells the GCS when it joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id; never reused.
    pub id: NodeId,
    /// Where its daemon listens (`host:port`).
    pub address: String,
    /// Its total resources.
    pub resources: ResourceSet,
    /// Labels for scheduling constraints (`zone=a`, `accelerator=h100`).
    pub labels: BTreeMap<String, String>,
}

/// Whether a node is part of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Registered and heartbeating.
    Alive,
    /// Gone for good; `cause` says why (missed heartbeats, drained, crashed).
    Dead {
        /// Why it was declared dead.
        cause: String,
    },
}

/// A row of the node table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// What the node registered.
    pub info: NodeInfo,
    /// Alive or dead.
    pub state: NodeState,
    /// When it registered, on the clock of the GCS that registered it.
    pub registered_at: Duration,
}

impl NodeRow {
    /// Whether the node is alive.
    pub fn is_alive(&self) -> bool {
        self.state == NodeState::Alive
    }

    fn encode(&self) -> Vec<u8> {
        let i = &self.info;
        let mut e = Encoder::new(ROW_VERSION);
        e.u64(i.id.0).str(&i.address).duration(self.registered_at);
        e.len(i.resources.iter().count());
        for (name, q) in &i.resources {
            e.str(name).u64(q.raw());
        }
        e.len(i.labels.len());
        for (k, v) in &i.labels {
            e.str(k).str(v);
        }
        match &self.state {
            NodeState::Alive => e.u8(0),
            NodeState::Dead { cause } => e.u8(1).str(cause),
        };
        e.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(bytes, ROW_VERSION)?;
        let id = NodeId(d.u64()?);
        let address = d.string()?;
        let registered_at = d.duration()?;
        let mut resources = ResourceSet::new();
        for _ in 0..d.len()? {
            let name = d.string()?;
            let q = Quantity::from_raw(d.u64()?);
            resources.set(&name, q);
        }
        let mut labels = BTreeMap::new();
        for _ in 0..d.len()? {
            let k = d.string()?;
            labels.insert(k, d.string()?);
        }
        let state = match d.u8()? {
            0 => NodeState::Alive,
            1 => NodeState::Dead { cause: d.string()? },
            t => return Err(DecodeError::new(format!("invalid node state tag {t}"))),
        };
        d.finish()?;
        Ok(Self {
            info: NodeInfo {
                id,
                address,
                resources,
                labels,
            },
            state,
            registered_at,
        })
    }
}

/// How node health is judged.
///
/// A busy judge is not a dead node: the shell checks health every
/// `check_every`, and when a check comes much later than that (the GCS's
/// own process was starved or paused), the gap beyond one period is the
/// judge's stall. Silence that overlaps a stall does not count against a
/// node, since the judge could not have heard it then: heartbeats sent
/// during the stall wait, unread, in the judge's sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// A node silent for longer than this (not counting the judge's own
    /// stalls) is declared dead.
    pub timeout: Duration,
    /// How often the shell calls [`Gcs::check_health`]. A check later than
    /// twice this after the previous one marks a stall; `None` never
    /// forgives silence.
    pub check_every: Option<Duration>,
}

impl HealthConfig {
    /// A `timeout`, checked ten times per timeout.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            check_every: Some(timeout / 10),
        }
    }
}

impl Default for HealthConfig {
    /// A 10 s timeout, checked every second.
    fn default() -> Self {
        Self::new(Duration::from_secs(10))
    }
}

/// The node rows, and the last heartbeat of each alive node.
#[derive(Debug, Default)]
pub(crate) struct NodeTable {
    rows: BTreeMap<NodeId, NodeRow>,
    /// Alive nodes only; ordered so health checks report deterministically.
    last_heartbeat: BTreeMap<NodeId, Heard>,
    /// When health was last checked.
    last_check: Option<Duration>,
    /// The judge's stalls so far, summed (see [`HealthConfig`]).
    stalled: Duration,
}

/// When a node was last heard from, and the judge's summed stalls then.
#[derive(Clone, Copy, Debug)]
struct Heard {
    at: Duration,
    stalled: Duration,
}

impl NodeTable {
    fn heard(&self, at: Duration) -> Heard {
        Heard {
            at,
            stalled: self.stalled,
        }
    }
}

impl NodeTable {
    pub(crate) fn row(&self, id: NodeId) -> Option<&NodeRow> {
        self.rows.get(&id)
    }

    /// Rebuilds the table from the `Nodes` table of a storage; alive nodes
    /// count as having heartbeated at `now`.
    pub(crate) fn recover(storage: &impl Storage, now: Duration) -> Result<Self, GcsError> {
        let corrupt = |reason: String| GcsError::Corrupt {
            table: Table::Nodes,
            reason,
        };
        let mut table = NodeTable::default();
        for (key, value) in storage.scan(Table::Nodes) {
            let id = key_array::<8>(&key)
                .map(|k| NodeId(u64::from_be_bytes(k)))
                .map_err(|e| corrupt(e.0))?;
            let row = NodeRow::decode(&value).map_err(|e| corrupt(format!("{id}: {}", e.0)))?;
            if row.info.id != id {
                return Err(corrupt(format!(
                    "row under key {id} is for {}",
                    row.info.id
                )));
            }
            if row.is_alive() {
                let heard = table.heard(now);
                table.last_heartbeat.insert(id, heard);
            }
            table.rows.insert(id, row);
        }
        Ok(table)
    }
}

impl<S: Storage> Gcs<S> {
    /// Adds an alive node; registering counts as its first heartbeat.
    ///
    /// # Errors
    /// [`GcsError::NodeExists`] if the id is in the table, alive or dead.
    pub fn register_node(&mut self, info: NodeInfo, now: Duration) -> Result<(), GcsError> {
        let id = info.id;
        if self.nodes.rows.contains_key(&id) {
            return Err(GcsError::NodeExists { node: id });
        }
        self.nodes.rows.insert(
            id,
            NodeRow {
                info,
                state: NodeState::Alive,
                registered_at: now,
            },
        );
        let heard = self.nodes.heard(now);
        self.nodes.last_heartbeat.insert(id, heard);
        self.write_node(id);
        Ok(())
    }

    /// Records that `node` was heard from at `now`. A `now` earlier than the
    /// last heartbeat is ignored, so late reports cannot shorten a node's life.
    ///
    /// # Errors
    /// [`GcsError::NodeNotFound`] for an unknown node; [`GcsError::NodeDead`]
    /// for a node already declared dead (it must register under a new id).
    pub fn heartbeat(&mut self, node: NodeId, now: Duration) -> Result<(), GcsError> {
        let row = self
            .nodes
            .rows
            .get(&node)
            .ok_or(GcsError::NodeNotFound { node })?;
        if let NodeState::Dead { cause } = &row.state {
            return Err(GcsError::NodeDead {
                node,
                cause: cause.clone(),
            });
        }
        let stalled = self.nodes.stalled;
        let last = self
            .nodes
            .last_heartbeat
            .get_mut(&node)
            .expect("every alive node has a last heartbeat");
        if now > last.at {
            *last = Heard { at: now, stalled };
        }
        Ok(())
    }

    /// Declares dead every alive node silent for more than
    /// [`HealthConfig::timeout`] at `now`, not counting the judge's own
    /// stalls (a check later than twice [`HealthConfig::check_every`] after
    /// the previous one); returns them in id order. A node heard from
    /// exactly `timeout` ago is still alive.
    pub fn check_health(&mut self, now: Duration) -> Vec<NodeId> {
        let health = self.config.health;
        if let (Some(every), Some(prev)) = (health.check_every, self.nodes.last_check) {
            let gap = now.saturating_sub(prev);
            if gap > every * 2 {
                self.nodes.stalled += gap - every;
            }
        }
        self.nodes.last_check = Some(self.nodes.last_check.map_or(now, |prev| prev.max(now)));
        let timeout = health.timeout;
        let stalled = self.nodes.stalled;
        let expired: Vec<(NodeId, Duration)> = self
            .nodes
            .last_heartbeat
            .iter()
            .filter_map(|(&id, last)| {
                let silent = now
                    .saturating_sub(last.at)
                    .saturating_sub(stalled - last.stalled);
                (silent > timeout).then_some((id, silent))
            })
            .collect();
        for &(id, silent) in &expired {
            let cause = format!("no heartbeat for {:.1?} (timeout {timeout:?})", silent);
            self.mark_node_dead(id, cause)
                .expect("the node was just found alive");
        }
        expired.into_iter().map(|(id, _)| id).collect()
    }

    /// Declares `node` dead with `cause` and fails the actors alive on it
    /// (see [`Gcs::actor_failed`]); returns those actors in id order. A node
    /// already dead keeps its first cause and nothing changes.
    ///
    /// # Errors
    /// [`GcsError::NodeNotFound`] for an unknown node.
    pub fn mark_node_dead(
        &mut self,
        node: NodeId,
        cause: impl Into<String>,
    ) -> Result<Vec<ActorId>, GcsError> {
        let row = self
            .nodes
            .rows
            .get_mut(&node)
            .ok_or(GcsError::NodeNotFound { node })?;
        if !row.is_alive() {
            return Ok(Vec::new());
        }
        let cause = cause.into();
        row.state = NodeState::Dead {
            cause: cause.clone(),
        };
        self.nodes.last_heartbeat.remove(&node);
        self.write_node(node);
        Ok(self.on_node_dead(node, &cause))
    }

    /// The row of node `id`, alive or dead.
    pub fn node(&self, id: NodeId) -> Option<&NodeRow> {
        self.nodes.rows.get(&id)
    }

    /// Every node, dead ones included, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeRow> + '_ {
        self.nodes.rows.values()
    }

    /// The alive nodes, in id order.
    pub fn alive_nodes(&self) -> impl Iterator<Item = &NodeRow> + '_ {
        self.nodes.rows.values().filter(|row| row.is_alive())
    }

    /// When alive node `id` was last heard from; `None` if it is dead or unknown.
    pub fn last_heartbeat(&self, id: NodeId) -> Option<Duration> {
        self.nodes.last_heartbeat.get(&id).map(|h| h.at)
    }

    /// The alive nodes that carry every label in `labels` with the same value.
    pub fn nodes_with_labels<'a>(
        &'a self,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a NodeRow> + 'a {
        self.alive_nodes().filter(move |row| {
            labels
                .iter()
                .all(|(k, v)| row.info.labels.get(k) == Some(v))
        })
    }

    /// Tells `Node` subscribers that something kept beside the table
    /// changed for alive node `node` (its load, which the service keeps):
    /// publishes its row as it is. Nothing for an unknown or dead node.
    pub fn republish_node(&mut self, node: NodeId) {
        let Some(row) = self.nodes.rows.get(&node) else {
            return;
        };
        if row.is_alive() && self.pubsub.wants(Channel::Node) {
            self.pubsub.publish(GcsEvent::Node(row.clone()));
        }
    }

    fn write_node(&mut self, id: NodeId) {
        let row = self.nodes.rows.get(&id).expect("caller just wrote the row");
        self.storage
            .put(Table::Nodes, &id.0.to_be_bytes(), &row.encode());
        if self.pubsub.wants(Channel::Node) {
            self.pubsub.publish(GcsEvent::Node(row.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::node;

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn node_without_heartbeat_is_marked_dead_after_timeout() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        assert!(gcs.check_health(secs(10)).is_empty());
        assert_eq!(gcs.check_health(secs(11)), vec![NodeId(1)]);
        let row = gcs.node(NodeId(1)).unwrap();
        assert!(matches!(&row.state, NodeState::Dead { cause } if cause.contains("no heartbeat")));
    }

    #[test]
    fn heartbeat_keeps_a_node_alive_past_the_timeout() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.heartbeat(NodeId(1), secs(8)).unwrap();
        assert!(gcs.check_health(secs(18)).is_empty());
        assert_eq!(gcs.last_heartbeat(NodeId(1)), Some(secs(8)));
        assert_eq!(gcs.check_health(secs(19)), vec![NodeId(1)]);
    }

    #[test]
    fn node_heard_from_exactly_timeout_ago_stays_alive() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        assert!(gcs.check_health(HealthConfig::default().timeout).is_empty());
        assert!(gcs.node(NodeId(1)).unwrap().is_alive());
    }

    #[test]
    fn check_health_reports_each_death_once() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(2), secs(0)).unwrap();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.register_node(node(3), secs(5)).unwrap();
        assert_eq!(gcs.check_health(secs(11)), vec![NodeId(1), NodeId(2)]);
        assert!(gcs.check_health(secs(12)).is_empty());
        for s in 13..15 {
            assert!(gcs.check_health(secs(s)).is_empty());
        }
        assert_eq!(gcs.check_health(secs(16)), vec![NodeId(3)]);
    }

    #[test]
    fn silence_during_the_judges_own_stall_does_not_count() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.register_node(node(2), secs(0)).unwrap();
        for s in 1..=4 {
            assert!(gcs.check_health(secs(s)).is_empty());
        }
        gcs.heartbeat(NodeId(2), secs(4)).unwrap();
        // The judge sleeps from 4 s to 30 s: 25 s of it is a stall, so the
        // nodes have been silent for 5 s and 1 s, as far as it could hear.
        assert!(gcs.check_health(secs(30)).is_empty());
        // Then time counts again: node 1 passes 10 s of silence at 36 s.
        for s in 31..=35 {
            assert!(gcs.check_health(secs(s)).is_empty(), "at {s} s");
        }
        assert_eq!(gcs.check_health(secs(36)), vec![NodeId(1)]);
        gcs.heartbeat(NodeId(2), secs(36)).unwrap();
        assert!(gcs.node(NodeId(2)).unwrap().is_alive());
    }

    #[test]
    fn without_a_check_period_no_silence_is_forgiven() {
        let config = crate::GcsConfig {
            health: HealthConfig {
                timeout: secs(10),
                check_every: None,
            },
            ..crate::GcsConfig::default()
        };
        let mut gcs = Gcs::with_config(crate::MemoryStorage::new(), config);
        gcs.register_node(node(1), secs(0)).unwrap();
        assert!(gcs.check_health(secs(1)).is_empty());
        assert_eq!(gcs.check_health(secs(30)), vec![NodeId(1)]);
    }

    #[test]
    fn late_heartbeat_does_not_move_the_last_heartbeat_back() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.heartbeat(NodeId(1), secs(9)).unwrap();
        gcs.heartbeat(NodeId(1), secs(3)).unwrap();
        assert_eq!(gcs.last_heartbeat(NodeId(1)), Some(secs(9)));
    }

    #[test]
    fn heartbeat_from_unknown_node_is_node_not_found() {
        let mut gcs = Gcs::in_memory();
        assert_eq!(
            gcs.heartbeat(NodeId(9), secs(0)),
            Err(GcsError::NodeNotFound { node: NodeId(9) })
        );
    }

    #[test]
    fn dead_node_cannot_heartbeat_back_to_life() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.mark_node_dead(NodeId(1), "drained").unwrap();
        assert_eq!(
            gcs.heartbeat(NodeId(1), secs(1)),
            Err(GcsError::NodeDead {
                node: NodeId(1),
                cause: "drained".to_owned()
            })
        );
        assert!(!gcs.node(NodeId(1)).unwrap().is_alive());
        assert_eq!(gcs.last_heartbeat(NodeId(1)), None);
    }

    #[test]
    fn registering_a_node_id_twice_is_an_error_even_after_death() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        assert_eq!(
            gcs.register_node(node(1), secs(1)),
            Err(GcsError::NodeExists { node: NodeId(1) })
        );
        gcs.mark_node_dead(NodeId(1), "crashed").unwrap();
        assert_eq!(
            gcs.register_node(node(1), secs(2)),
            Err(GcsError::NodeExists { node: NodeId(1) })
        );
    }

    #[test]
    fn mark_node_dead_keeps_the_first_cause() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        gcs.mark_node_dead(NodeId(1), "first").unwrap();
        gcs.mark_node_dead(NodeId(1), "second").unwrap();
        assert_eq!(
            gcs.node(NodeId(1)).unwrap().state,
            NodeState::Dead {
                cause: "first".to_owned()
            }
        );
        assert_eq!(
            gcs.mark_node_dead(NodeId(7), "x"),
            Err(GcsError::NodeNotFound { node: NodeId(7) })
        );
    }

    #[test]
    fn alive_nodes_leaves_out_dead_ones() {
        let mut gcs = Gcs::in_memory();
        for id in 1..=3 {
            gcs.register_node(node(id), secs(0)).unwrap();
        }
        gcs.mark_node_dead(NodeId(2), "gone").unwrap();
        let alive: Vec<NodeId> = gcs.alive_nodes().map(|r| r.info.id).collect();
        assert_eq!(alive, vec![NodeId(1), NodeId(3)]);
        assert_eq!(gcs.nodes().count(), 3);
    }

    #[test]
    fn nodes_with_labels_matches_every_label() {
        let mut gcs = Gcs::in_memory();
        for id in 1..=4 {
            gcs.register_node(node(id), secs(0)).unwrap();
        }
        gcs.mark_node_dead(NodeId(3), "gone").unwrap();
        let want = BTreeMap::from([("zone".to_owned(), "z1".to_owned())]);
        let found: Vec<NodeId> = gcs.nodes_with_labels(&want).map(|r| r.info.id).collect();
        assert_eq!(found, vec![NodeId(1)]);
        let none = BTreeMap::from([("gpu".to_owned(), "h100".to_owned())]);
        assert_eq!(gcs.nodes_with_labels(&none).count(), 0);
        assert_eq!(gcs.nodes_with_labels(&BTreeMap::new()).count(), 3);
    }

    #[test]
    fn node_rows_round_trip_through_their_encoding() {
        let alive = NodeRow {
            info: node(5),
            state: NodeState::Alive,
            registered_at: Duration::new(3, 7),
        };
        let dead = NodeRow {
            state: NodeState::Dead {
                cause: "oom".to_owned(),
            },
            ..alive.clone()
        };
        for row in [alive, dead] {
            assert_eq!(NodeRow::decode(&row.encode()).unwrap(), row);
        }
    }

    #[test]
    fn recovered_alive_nodes_get_a_full_timeout_from_recovery() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), secs(0)).unwrap();
        let mut back = Gcs::recover(gcs.storage().clone(), secs(500)).unwrap();
        assert_eq!(back.last_heartbeat(NodeId(1)), Some(secs(500)));
        assert!(back.check_health(secs(510)).is_empty());
        assert_eq!(back.check_health(secs(511)), vec![NodeId(1)]);
    }
}
