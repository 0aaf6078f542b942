//! Pub/sub of table changes: each subscriber has a bounded queue of events.
//!
//! The GCS has no I/O, so delivery is by polling: the service (or the embedded
//! runtime) calls [`Gcs::poll_events`](crate::Gcs::poll_events) and forwards
//! what it gets. A subscriber that does not poll cannot grow the GCS without
//! bound: past its queue capacity the *oldest* events are dropped and
//! counted. Events carry whole rows, so the newest event about a row
//! supersedes older ones; a subscriber that sees [`Gcs::dropped`](crate::Gcs::dropped)
//! grow should re-read the tables it follows.

use std::collections::VecDeque;
use std::fmt;

use hashbrown::HashMap;

use crate::actors::ActorRow;
use crate::jobs::JobRow;
use crate::nodes::NodeRow;

/// What a subscriber follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Node registrations and deaths.
    Node,
    /// Actor registrations and state changes.
    Actor,
    /// Job starts and ends.
    Job,
}

/// One change to a table: the row as it is after the change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcsEvent {
    /// A node row changed (registered or declared dead).
    Node(NodeRow),
    /// An actor row changed (registered or changed state).
    Actor(ActorRow),
    /// A job row changed (added or finished).
    Job(JobRow),
}

impl GcsEvent {
    /// The channel this event is published on.
    pub fn channel(&self) -> Channel {
        match self {
            GcsEvent::Node(_) => Channel::Node,
            GcsEvent::Actor(_) => Channel::Actor,
            GcsEvent::Job(_) => Channel::Job,
        }
    }
}

/// A subscription, returned by [`Gcs::subscribe`](crate::Gcs::subscribe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubscriberId(pub u64);

impl fmt::Display for SubscriberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sub-{:x}", self.0)
    }
}

#[derive(Debug)]
struct Subscriber {
    channel: Channel,
    queue: VecDeque<GcsEvent>,
    dropped: u64,
}

/// The subscribers and their queues.
#[derive(Debug)]
pub(crate) struct PubSub {
    capacity: usize,
    next_id: u64,
    subscribers: HashMap<SubscriberId, Subscriber>,
}

impl PubSub {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            next_id: 0,
            subscribers: HashMap::new(),
        }
    }

    pub(crate) fn subscribe(&mut self, channel: Channel) -> SubscriberId {
        let id = SubscriberId(self.next_id);
        self.next_id += 1;
        self.subscribers.insert(
            id,
            Subscriber {
                channel,
                queue: VecDeque::new(),
                dropped: 0,
            },
        );
        id
    }

    pub(crate) fn unsubscribe(&mut self, id: SubscriberId) -> bool {
        self.subscribers.remove(&id).is_some()
    }

    /// Whether anyone follows `channel`, so callers can skip building events
    /// (cloning rows) nobody will read.
    pub(crate) fn wants(&self, channel: Channel) -> bool {
        self.subscribers.values().any(|s| s.channel == channel)
    }

    pub(crate) fn publish(&mut self, event: GcsEvent) {
        let channel = event.channel();
        for sub in self.subscribers.values_mut() {
            if sub.channel != channel {
                continue;
            }
            if self.capacity == 0 {
                sub.dropped += 1;
                continue;
            }
            if sub.queue.len() >= self.capacity {
                sub.queue.pop_front();
                sub.dropped += 1;
            }
            sub.queue.push_back(event.clone());
        }
    }

    pub(crate) fn poll(&mut self, id: SubscriberId) -> Vec<GcsEvent> {
        self.subscribers
            .get_mut(&id)
            .map_or_else(Vec::new, |s| Vec::from(std::mem::take(&mut s.queue)))
    }

    pub(crate) fn dropped(&self, id: SubscriberId) -> u64 {
        self.subscribers.get(&id).map_or(0, |s| s.dropped)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ray_proto::{JobId, NodeId};

    use super::*;
    use crate::fixtures::{actor, actor_id, job, node};
    use crate::{ActorState, Gcs, GcsConfig};

    #[test]
    fn subscriber_queue_is_bounded_and_counts_drops() {
        let config = GcsConfig {
            subscriber_queue_capacity: 3,
            ..GcsConfig::default()
        };
        let mut gcs = Gcs::with_config(crate::MemoryStorage::new(), config);
        let sub = gcs.subscribe(Channel::Job);
        for id in 0..5 {
            gcs.add_job(job(id)).unwrap();
        }
        assert_eq!(gcs.dropped(sub), 2);
        // The oldest events went; the newest stay, in order.
        let ids: Vec<JobId> = gcs
            .poll_events(sub)
            .into_iter()
            .map(|e| match e {
                GcsEvent::Job(row) => row.info.id,
                other => panic!("unexpected event {other:?}"),
            })
            .collect();
        assert_eq!(ids, vec![JobId(2), JobId(3), JobId(4)]);
        assert_eq!(gcs.dropped(sub), 2);
    }

    #[test]
    fn zero_capacity_queue_drops_everything() {
        let config = GcsConfig {
            subscriber_queue_capacity: 0,
            ..GcsConfig::default()
        };
        let mut gcs = Gcs::with_config(crate::MemoryStorage::new(), config);
        let sub = gcs.subscribe(Channel::Job);
        gcs.add_job(job(1)).unwrap();
        assert!(gcs.poll_events(sub).is_empty());
        assert_eq!(gcs.dropped(sub), 1);
    }

    #[test]
    fn subscribers_see_only_their_channel() {
        let mut gcs = Gcs::in_memory();
        let nodes = gcs.subscribe(Channel::Node);
        let jobs = gcs.subscribe(Channel::Job);
        gcs.register_node(node(1), Duration::ZERO).unwrap();
        gcs.add_job(job(1)).unwrap();
        assert!(matches!(&gcs.poll_events(nodes)[..], [GcsEvent::Node(_)]));
        assert!(matches!(&gcs.poll_events(jobs)[..], [GcsEvent::Job(_)]));
    }

    #[test]
    fn poll_events_drains_the_queue() {
        let mut gcs = Gcs::in_memory();
        let sub = gcs.subscribe(Channel::Job);
        gcs.add_job(job(1)).unwrap();
        assert_eq!(gcs.poll_events(sub).len(), 1);
        assert!(gcs.poll_events(sub).is_empty());
    }

    #[test]
    fn unsubscribed_subscriber_gets_nothing() {
        let mut gcs = Gcs::in_memory();
        let sub = gcs.subscribe(Channel::Job);
        assert!(gcs.unsubscribe(sub));
        assert!(!gcs.unsubscribe(sub));
        gcs.add_job(job(1)).unwrap();
        assert!(gcs.poll_events(sub).is_empty());
        assert_eq!(gcs.dropped(sub), 0);
    }

    #[test]
    fn events_from_before_subscribing_are_not_replayed() {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        let sub = gcs.subscribe(Channel::Job);
        assert!(gcs.poll_events(sub).is_empty());
    }

    #[test]
    fn every_state_change_publishes_the_row_after_it() {
        let mut gcs = Gcs::in_memory();
        let nodes = gcs.subscribe(Channel::Node);
        let actors = gcs.subscribe(Channel::Actor);
        let jobs = gcs.subscribe(Channel::Job);
        gcs.register_node(node(1), Duration::ZERO).unwrap();
        gcs.add_job(job(1)).unwrap();
        gcs.register_actor(actor(1, 1)).unwrap();
        gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(1) })
            .unwrap();
        gcs.mark_node_dead(NodeId(1), "gone").unwrap();
        gcs.finish_job(JobId(1), Duration::from_secs(2)).unwrap();

        let node_events = gcs.poll_events(nodes);
        assert!(matches!(&node_events[..],
            [GcsEvent::Node(a), GcsEvent::Node(b)] if a.is_alive() && !b.is_alive()));

        let states: Vec<ActorState> = gcs
            .poll_events(actors)
            .into_iter()
            .map(|e| match e {
                GcsEvent::Actor(row) => row.state,
                other => panic!("unexpected event {other:?}"),
            })
            .collect();
        assert_eq!(states.len(), 3);
        assert_eq!(states[0], ActorState::PendingCreation);
        assert_eq!(states[1], ActorState::Alive { node: NodeId(1) });
        assert!(states[2].is_dead());

        let job_events = gcs.poll_events(jobs);
        assert!(matches!(&job_events[..],
            [GcsEvent::Job(a), GcsEvent::Job(b)] if a.is_running() && !b.is_running()));
    }

    #[test]
    fn heartbeats_and_kv_writes_publish_nothing() {
        let mut gcs = Gcs::in_memory();
        gcs.register_node(node(1), Duration::ZERO).unwrap();
        let subs = [Channel::Node, Channel::Actor, Channel::Job].map(|c| gcs.subscribe(c));
        gcs.heartbeat(NodeId(1), Duration::from_secs(1)).unwrap();
        gcs.kv_put("ns", b"k", b"v".to_vec(), true);
        for sub in subs {
            assert!(gcs.poll_events(sub).is_empty());
        }
    }
}
