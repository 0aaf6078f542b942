//! The actor table: registration, names, the state machine and restarts.
//!
//! An actor is registered `PendingCreation`, becomes `Alive` on a node, may go
//! through `Restarting` up to `max_restarts` times, and ends `Dead`, which is
//! final. A name is unique within its namespace among actors that are not
//! dead; a dead actor releases its name.

use std::collections::BTreeMap;

use hashbrown::HashMap;
use ray_proto::{ActorId, JobId, NodeId, WorkerId};

use crate::codec::{key_array, DecodeError, Decoder, Encoder};
use crate::error::GcsError;
use crate::nodes::NodeState;
use crate::pubsub::{Channel, GcsEvent};
use crate::storage::{Storage, Table};
use crate::Gcs;

const ROW_VERSION: u8 = 1;

/// What the creator of an actor registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorInfo {
    /// The actor's id, drawn by its owner.
    pub id: ActorId,
    /// The actor's type, for display and for the dashboard.
    pub class_name: String,
    /// A name other jobs can look it up by, unique within `namespace`.
    pub name: Option<String>,
    /// The namespace the name lives in.
    pub namespace: String,
    /// The job that created it.
    pub job: JobId,
    /// Whether it outlives its job (it is then killed only explicitly).
    pub detached: bool,
    /// How many times it may be restarted after a failure; 0 for never,
    /// `u32::MAX` for as good as always.
    pub max_restarts: u32,
}

/// Where an actor is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActorState {
    /// Registered, not yet placed and started.
    PendingCreation,
    /// Running on `node`.
    Alive {
        /// The node hosting it.
        node: NodeId,
    },
    /// Failed and being restarted; this is restart number `attempt` (from 1).
    Restarting {
        /// The restart number.
        attempt: u32,
    },
    /// Gone for good; `cause` says why.
    Dead {
        /// Why it died.
        cause: String,
    },
}

impl ActorState {
    /// Whether this is the final state.
    pub fn is_dead(&self) -> bool {
        matches!(self, ActorState::Dead { .. })
    }
}

/// A row of the actor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorRow {
    /// What was registered.
    pub info: ActorInfo,
    /// Its current state.
    pub state: ActorState,
    /// How many restarts it has used.
    pub restart_count: u32,
}

impl ActorRow {
    fn encode(&self) -> Vec<u8> {
        let i = &self.info;
        let mut e = Encoder::new(ROW_VERSION);
        e.u64(i.id.owner.0)
            .u64(i.id.seq)
            .str(&i.class_name)
            .opt_str(i.name.as_deref())
            .str(&i.namespace)
            .u32(i.job.0)
            .bool(i.detached)
            .u32(i.max_restarts)
            .u32(self.restart_count);
        match &self.state {
            ActorState::PendingCreation => e.u8(0),
            ActorState::Alive { node } => e.u8(1).u64(node.0),
            ActorState::Restarting { attempt } => e.u8(2).u32(*attempt),
            ActorState::Dead { cause } => e.u8(3).str(cause),
        };
        e.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(bytes, ROW_VERSION)?;
        let info = ActorInfo {
            id: ActorId::new(WorkerId(d.u64()?), d.u64()?),
            class_name: d.string()?,
            name: d.opt_string()?,
            namespace: d.string()?,
            job: JobId(d.u32()?),
            detached: d.bool()?,
            max_restarts: d.u32()?,
        };
        let restart_count = d.u32()?;
        let state = match d.u8()? {
            0 => ActorState::PendingCreation,
            1 => ActorState::Alive {
                node: NodeId(d.u64()?),
            },
            2 => ActorState::Restarting { attempt: d.u32()? },
            3 => ActorState::Dead { cause: d.string()? },
            t => return Err(DecodeError::new(format!("invalid actor state tag {t}"))),
        };
        d.finish()?;
        Ok(Self {
            info,
            state,
            restart_count,
        })
    }
}

fn actor_key(id: ActorId) -> [u8; 16] {
    let mut key = [0; 16];
    key[..8].copy_from_slice(&id.owner.0.to_be_bytes());
    key[8..].copy_from_slice(&id.seq.to_be_bytes());
    key
}

fn decode_actor_key(key: &[u8]) -> Result<ActorId, DecodeError> {
    let key = key_array::<16>(key)?;
    let (owner, seq) = key.split_at(8);
    let owner = u64::from_be_bytes(owner.try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(seq.try_into().expect("8 bytes"));
    Ok(ActorId::new(WorkerId(owner), seq))
}

/// Removes `info`'s name from the index if `info`'s actor holds it.
fn release_name(names: &mut HashMap<String, HashMap<String, ActorId>>, info: &ActorInfo) {
    let Some(name) = &info.name else { return };
    let Some(in_namespace) = names.get_mut(&info.namespace) else {
        return;
    };
    if in_namespace.get(name) == Some(&info.id) {
        in_namespace.remove(name);
        if in_namespace.is_empty() {
            names.remove(&info.namespace);
        }
    }
}

/// The actor rows and the index of names held by actors that are not dead.
#[derive(Debug, Default)]
pub(crate) struct ActorTable {
    rows: BTreeMap<ActorId, ActorRow>,
    /// namespace → name → actor.
    names: HashMap<String, HashMap<String, ActorId>>,
}

impl ActorTable {
    fn name_holder(&self, namespace: &str, name: &str) -> Option<ActorId> {
        self.names.get(namespace)?.get(name).copied()
    }

    fn claim_name(&mut self, info: &ActorInfo) {
        if let Some(name) = &info.name {
            self.names
                .entry_ref(info.namespace.as_str())
                .or_default()
                .insert(name.clone(), info.id);
        }
    }

    /// Rebuilds the table (and the name index) from the `Actors` table of a
    /// storage.
    pub(crate) fn recover(storage: &impl Storage) -> Result<Self, GcsError> {
        let corrupt = |reason: String| GcsError::Corrupt {
            table: Table::Actors,
            reason,
        };
        let mut table = ActorTable::default();
        for (key, value) in storage.scan(Table::Actors) {
            let id = decode_actor_key(&key).map_err(|e| corrupt(e.0))?;
            let row = ActorRow::decode(&value).map_err(|e| corrupt(format!("{id}: {}", e.0)))?;
            if row.info.id != id {
                return Err(corrupt(format!(
                    "row under key {id} is for {}",
                    row.info.id
                )));
            }
            if !row.state.is_dead() {
                if let Some(name) = &row.info.name {
                    if let Some(other) = table.name_holder(&row.info.namespace, name) {
                        return Err(corrupt(format!(
                            "live actors {other} and {id} both hold name {name:?} in namespace {:?}",
                            row.info.namespace
                        )));
                    }
                }
                table.claim_name(&row.info);
            }
            table.rows.insert(id, row);
        }
        Ok(table)
    }
}

impl<S: Storage> Gcs<S> {
    /// Registers an actor in `PendingCreation`, claiming its name if it has one.
    ///
    /// # Errors
    /// [`GcsError::ActorExists`] if the id is taken; [`GcsError::JobNotFound`]
    /// or [`GcsError::JobFinished`] unless its job is running;
    /// [`GcsError::NameTaken`] if a live actor holds the name in the namespace.
    pub fn register_actor(&mut self, info: ActorInfo) -> Result<(), GcsError> {
        if self.actors.rows.contains_key(&info.id) {
            return Err(GcsError::ActorExists { actor: info.id });
        }
        match self.job(info.job) {
            None => return Err(GcsError::JobNotFound { job: info.job }),
            Some(job) if !job.is_running() => return Err(GcsError::JobFinished { job: info.job }),
            Some(_) => {}
        }
        if let Some(name) = &info.name {
            if let Some(existing) = self.actors.name_holder(&info.namespace, name) {
                return Err(GcsError::NameTaken {
                    namespace: info.namespace.clone(),
                    name: name.clone(),
                    existing,
                });
            }
        }
        self.actors.claim_name(&info);
        let id = info.id;
        self.actors.rows.insert(
            id,
            ActorRow {
                info,
                state: ActorState::PendingCreation,
                restart_count: 0,
            },
        );
        self.write_actor(id);
        Ok(())
    }

    /// Moves an actor to `state`. Setting the state it is in does nothing.
    ///
    /// `Restarting { attempt }` must be the next restart (`restart_count + 1`)
    /// and records it in `restart_count`; `Dead` releases the actor's name.
    ///
    /// # Errors
    /// [`GcsError::ActorNotFound`]; [`GcsError::InvalidActorTransition`] out of
    /// `Dead`, back to `PendingCreation`, or for an out-of-sequence restart;
    /// [`GcsError::RestartsExhausted`] for a restart past `max_restarts`;
    /// [`GcsError::NodeNotFound`] or [`GcsError::NodeDead`] for `Alive` on a
    /// node that is not alive.
    pub fn set_actor_state(&mut self, id: ActorId, state: ActorState) -> Result<(), GcsError> {
        let row = self
            .actors
            .rows
            .get(&id)
            .ok_or(GcsError::ActorNotFound { actor: id })?;
        if row.state == state {
            return Ok(());
        }
        let invalid = || GcsError::InvalidActorTransition {
            actor: id,
            from: row.state.clone(),
            to: state.clone(),
        };
        match (&row.state, &state) {
            (ActorState::Dead { .. }, _) | (_, ActorState::PendingCreation) => {
                return Err(invalid())
            }
            (_, ActorState::Restarting { attempt }) => {
                if row.restart_count >= row.info.max_restarts {
                    return Err(GcsError::RestartsExhausted {
                        actor: id,
                        max_restarts: row.info.max_restarts,
                    });
                }
                if *attempt != row.restart_count + 1 {
                    return Err(invalid());
                }
            }
            (_, ActorState::Alive { node }) => match self.nodes.row(*node) {
                None => return Err(GcsError::NodeNotFound { node: *node }),
                Some(n) => {
                    if let NodeState::Dead { cause } = &n.state {
                        return Err(GcsError::NodeDead {
                            node: *node,
                            cause: cause.clone(),
                        });
                    }
                }
            },
            (_, ActorState::Dead { .. }) => {}
        }
        self.apply_actor_state(id, state);
        Ok(())
    }

    /// Reports that an actor's process failed: it is restarted (moved to the
    /// next `Restarting` attempt) if it has restarts left, else it is `Dead`
    /// with `cause`. Returns the state it ends in. A dead actor stays dead.
    ///
    /// # Errors
    /// [`GcsError::ActorNotFound`].
    pub fn actor_failed(
        &mut self,
        id: ActorId,
        cause: impl Into<String>,
    ) -> Result<ActorState, GcsError> {
        let row = self
            .actors
            .rows
            .get(&id)
            .ok_or(GcsError::ActorNotFound { actor: id })?;
        let next = if row.state.is_dead() {
            return Ok(row.state.clone());
        } else if row.restart_count < row.info.max_restarts {
            ActorState::Restarting {
                attempt: row.restart_count + 1,
            }
        } else {
            ActorState::Dead {
                cause: cause.into(),
            }
        };
        self.apply_actor_state(id, next.clone());
        Ok(next)
    }

    /// The live actor holding `name` in `namespace`.
    pub fn named_actor(&self, namespace: &str, name: &str) -> Option<ActorId> {
        self.actors.name_holder(namespace, name)
    }

    /// The row of actor `id`.
    pub fn actor(&self, id: ActorId) -> Option<&ActorRow> {
        self.actors.rows.get(&id)
    }

    /// Every actor, dead ones included, in id order.
    pub fn actors(&self) -> impl Iterator<Item = &ActorRow> + '_ {
        self.actors.rows.values()
    }

    /// How many restarts actor `id` has used.
    pub fn restart_count(&self, id: ActorId) -> Option<u32> {
        self.actor(id).map(|row| row.restart_count)
    }

    /// Kills the actors of a finished job that are not detached and not
    /// already dead, and its detached ones that never came alive (their
    /// creator, the job's, is gone: nobody will finish creating them, and
    /// their names would stay held); returns them in id order.
    pub(crate) fn on_job_finished(&mut self, job: JobId) -> Vec<ActorId> {
        let doomed: Vec<ActorId> = self
            .actors
            .rows
            .values()
            .filter(|r| {
                r.info.job == job
                    && (!r.info.detached || r.state == ActorState::PendingCreation)
                    && !r.state.is_dead()
            })
            .map(|r| r.info.id)
            .collect();
        for &id in &doomed {
            let cause = format!("job {job} finished");
            self.apply_actor_state(id, ActorState::Dead { cause });
        }
        doomed
    }

    /// Fails every actor alive on a node that died (restarting those with
    /// restarts left); returns them in id order.
    pub(crate) fn on_node_dead(&mut self, node: NodeId, cause: &str) -> Vec<ActorId> {
        let hosted: Vec<ActorId> = self
            .actors
            .rows
            .values()
            .filter(|r| r.state == ActorState::Alive { node })
            .map(|r| r.info.id)
            .collect();
        for &id in &hosted {
            self.actor_failed(id, format!("node {node} died: {cause}"))
                .expect("the actor was just found in the table");
        }
        hosted
    }

    /// Sets a state already checked to be allowed, keeps `restart_count` and
    /// the name index in step, and writes the row through.
    fn apply_actor_state(&mut self, id: ActorId, state: ActorState) {
        let ActorTable { rows, names } = &mut self.actors;
        let row = rows.get_mut(&id).expect("caller checked the actor exists");
        if let ActorState::Restarting { attempt } = state {
            row.restart_count = attempt;
        }
        let dies = state.is_dead();
        row.state = state;
        if dies {
            release_name(names, &row.info);
        }
        self.write_actor(id);
    }

    fn write_actor(&mut self, id: ActorId) {
        let row = self
            .actors
            .rows
            .get(&id)
            .expect("caller just wrote the row");
        self.storage
            .put(Table::Actors, &actor_key(id), &row.encode());
        if self.pubsub.wants(Channel::Actor) {
            self.pubsub.publish(GcsEvent::Actor(row.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fixtures::{actor, actor_id, job, named, node};

    /// A GCS with running jobs 1 and 2 and alive nodes 1 and 2.
    fn gcs() -> Gcs {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        gcs.add_job(job(2)).unwrap();
        gcs.register_node(node(1), Duration::ZERO).unwrap();
        gcs.register_node(node(2), Duration::ZERO).unwrap();
        gcs
    }

    fn dead(cause: &str) -> ActorState {
        ActorState::Dead {
            cause: cause.to_owned(),
        }
    }

    #[test]
    fn registered_actor_starts_pending_creation() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        let row = gcs.actor(actor_id(1)).unwrap();
        assert_eq!(row.state, ActorState::PendingCreation);
        assert_eq!(gcs.restart_count(actor_id(1)), Some(0));
    }

    #[test]
    fn registering_an_actor_id_twice_is_an_error() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        assert_eq!(
            gcs.register_actor(actor(1, 1)),
            Err(GcsError::ActorExists { actor: actor_id(1) })
        );
    }

    #[test]
    fn actor_of_unknown_or_finished_job_is_rejected() {
        let mut gcs = gcs();
        assert_eq!(
            gcs.register_actor(actor(1, 9)),
            Err(GcsError::JobNotFound { job: JobId(9) })
        );
        gcs.finish_job(JobId(2), Duration::ZERO).unwrap();
        assert_eq!(
            gcs.register_actor(actor(1, 2)),
            Err(GcsError::JobFinished { job: JobId(2) })
        );
    }

    #[test]
    fn actor_name_is_unique_per_namespace() {
        let mut gcs = gcs();
        gcs.register_actor(named(actor(1, 1), "ns", "counter"))
            .unwrap();
        assert_eq!(
            gcs.register_actor(named(actor(2, 2), "ns", "counter")),
            Err(GcsError::NameTaken {
                namespace: "ns".to_owned(),
                name: "counter".to_owned(),
                existing: actor_id(1),
            })
        );
        gcs.register_actor(named(actor(3, 1), "other", "counter"))
            .unwrap();
        assert_eq!(gcs.named_actor("ns", "counter"), Some(actor_id(1)));
        assert_eq!(gcs.named_actor("other", "counter"), Some(actor_id(3)));
        assert_eq!(gcs.named_actor("ns", "missing"), None);
        assert!(gcs.actor(actor_id(2)).is_none());
    }

    #[test]
    fn dead_actor_releases_its_name() {
        let mut gcs = gcs();
        gcs.register_actor(named(actor(1, 1), "ns", "counter"))
            .unwrap();
        gcs.set_actor_state(actor_id(1), dead("killed")).unwrap();
        assert_eq!(gcs.named_actor("ns", "counter"), None);
        gcs.register_actor(named(actor(2, 1), "ns", "counter"))
            .unwrap();
        assert_eq!(gcs.named_actor("ns", "counter"), Some(actor_id(2)));
    }

    #[test]
    fn job_end_kills_non_detached_actors_and_detached_ones_never_created() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        let mut detached = named(actor(2, 1), "ns", "service");
        detached.detached = true;
        gcs.register_actor(detached).unwrap();
        let alive = ActorState::Alive { node: NodeId(1) };
        gcs.set_actor_state(actor_id(2), alive.clone()).unwrap();
        // Detached, but still being created when its job ended: nobody
        // will finish it, and its name must not stay held.
        let mut unborn = named(actor(6, 1), "ns", "unborn");
        unborn.detached = true;
        gcs.register_actor(unborn).unwrap();
        gcs.register_actor(named(actor(3, 1), "ns", "worker"))
            .unwrap();
        gcs.register_actor(actor(4, 2)).unwrap();
        gcs.register_actor(actor(5, 1)).unwrap();
        gcs.set_actor_state(actor_id(5), dead("crashed")).unwrap();

        let killed = gcs.finish_job(JobId(1), Duration::from_secs(3)).unwrap();

        assert_eq!(killed, vec![actor_id(1), actor_id(3), actor_id(6)]);
        for id in [1, 3, 6] {
            let state = &gcs.actor(actor_id(id)).unwrap().state;
            assert_eq!(*state, dead("job job-1 finished"));
        }
        assert_eq!(gcs.actor(actor_id(2)).unwrap().state, alive);
        assert_eq!(gcs.named_actor("ns", "unborn"), None);
        assert_eq!(
            gcs.actor(actor_id(4)).unwrap().state,
            ActorState::PendingCreation
        );
        assert_eq!(gcs.actor(actor_id(5)).unwrap().state, dead("crashed"));
        assert_eq!(gcs.named_actor("ns", "worker"), None);
        assert_eq!(gcs.named_actor("ns", "service"), Some(actor_id(2)));
    }

    #[test]
    fn dead_is_final() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        gcs.set_actor_state(actor_id(1), dead("killed")).unwrap();
        let err = gcs
            .set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(1) })
            .unwrap_err();
        assert!(
            matches!(err, GcsError::InvalidActorTransition { .. }),
            "{err}"
        );
        // Failing a dead actor again is not an error and changes nothing.
        assert_eq!(
            gcs.actor_failed(actor_id(1), "again").unwrap(),
            dead("killed")
        );
    }

    #[test]
    fn actor_cannot_go_back_to_pending_creation() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(1) })
            .unwrap();
        assert!(matches!(
            gcs.set_actor_state(actor_id(1), ActorState::PendingCreation),
            Err(GcsError::InvalidActorTransition { .. })
        ));
    }

    #[test]
    fn restart_attempts_must_be_in_sequence_and_within_budget() {
        let mut gcs = gcs();
        let mut info = actor(1, 1);
        info.max_restarts = 2;
        gcs.register_actor(info).unwrap();
        let restarting = |attempt| ActorState::Restarting { attempt };
        assert!(matches!(
            gcs.set_actor_state(actor_id(1), restarting(2)),
            Err(GcsError::InvalidActorTransition { .. })
        ));
        gcs.set_actor_state(actor_id(1), restarting(1)).unwrap();
        gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(1) })
            .unwrap();
        gcs.set_actor_state(actor_id(1), restarting(2)).unwrap();
        assert_eq!(gcs.restart_count(actor_id(1)), Some(2));
        assert_eq!(
            gcs.set_actor_state(actor_id(1), restarting(3)),
            Err(GcsError::RestartsExhausted {
                actor: actor_id(1),
                max_restarts: 2
            })
        );
    }

    #[test]
    fn actor_failed_restarts_until_the_budget_is_spent_then_kills() {
        let mut gcs = gcs();
        let mut info = named(actor(1, 1), "ns", "flaky");
        info.max_restarts = 1;
        gcs.register_actor(info).unwrap();
        let alive = ActorState::Alive { node: NodeId(1) };
        gcs.set_actor_state(actor_id(1), alive.clone()).unwrap();
        assert_eq!(
            gcs.actor_failed(actor_id(1), "segfault").unwrap(),
            ActorState::Restarting { attempt: 1 }
        );
        assert_eq!(gcs.named_actor("ns", "flaky"), Some(actor_id(1)));
        gcs.set_actor_state(actor_id(1), alive).unwrap();
        assert_eq!(
            gcs.actor_failed(actor_id(1), "segfault").unwrap(),
            dead("segfault")
        );
        assert_eq!(gcs.restart_count(actor_id(1)), Some(1));
        assert_eq!(gcs.named_actor("ns", "flaky"), None);
        assert_eq!(
            gcs.actor_failed(actor_id(9), "x"),
            Err(GcsError::ActorNotFound { actor: actor_id(9) })
        );
    }

    #[test]
    fn actor_cannot_be_alive_on_a_dead_or_unknown_node() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        gcs.mark_node_dead(NodeId(2), "gone").unwrap();
        assert_eq!(
            gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(2) }),
            Err(GcsError::NodeDead {
                node: NodeId(2),
                cause: "gone".to_owned()
            })
        );
        assert_eq!(
            gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(7) }),
            Err(GcsError::NodeNotFound { node: NodeId(7) })
        );
        assert_eq!(
            gcs.set_actor_state(actor_id(9), dead("x")),
            Err(GcsError::ActorNotFound { actor: actor_id(9) })
        );
    }

    #[test]
    fn node_death_restarts_or_kills_the_actors_it_hosted() {
        let mut gcs = gcs();
        let mut resilient = actor(1, 1);
        resilient.max_restarts = 3;
        gcs.register_actor(resilient).unwrap();
        gcs.register_actor(actor(2, 1)).unwrap();
        gcs.register_actor(actor(3, 1)).unwrap();
        for (id, node) in [(1, 1), (2, 1), (3, 2)] {
            gcs.set_actor_state(actor_id(id), ActorState::Alive { node: NodeId(node) })
                .unwrap();
        }

        let failed = gcs.mark_node_dead(NodeId(1), "kernel panic").unwrap();

        assert_eq!(failed, vec![actor_id(1), actor_id(2)]);
        assert_eq!(
            gcs.actor(actor_id(1)).unwrap().state,
            ActorState::Restarting { attempt: 1 }
        );
        assert_eq!(
            gcs.actor(actor_id(2)).unwrap().state,
            dead("node node-1 died: kernel panic")
        );
        assert_eq!(
            gcs.actor(actor_id(3)).unwrap().state,
            ActorState::Alive { node: NodeId(2) }
        );
    }

    #[test]
    fn setting_the_current_state_changes_nothing() {
        let mut gcs = gcs();
        gcs.register_actor(actor(1, 1)).unwrap();
        let sub = gcs.subscribe(Channel::Actor);
        gcs.set_actor_state(actor_id(1), ActorState::PendingCreation)
            .unwrap();
        assert!(gcs.poll_events(sub).is_empty());
    }

    #[test]
    fn actor_rows_round_trip_through_their_encoding() {
        let mut info = named(actor(7, 3), "ns", "name");
        info.detached = true;
        info.max_restarts = 5;
        let states = [
            ActorState::PendingCreation,
            ActorState::Alive { node: NodeId(4) },
            ActorState::Restarting { attempt: 2 },
            dead("bye"),
        ];
        for state in states {
            let row = ActorRow {
                info: info.clone(),
                state,
                restart_count: 2,
            };
            assert_eq!(ActorRow::decode(&row.encode()).unwrap(), row);
        }
    }
}
