//! Rows for unit tests.

use std::collections::BTreeMap;
use std::time::Duration;

use ray_proto::{ActorId, JobId, NodeId, WorkerId};
use ray_sched::{Quantity, ResourceSet};

use crate::{ActorInfo, JobInfo, NodeInfo};

pub(crate) fn node(id: u64) -> NodeInfo {
    NodeInfo {
        id: NodeId(id),
        address: format!("10.0.0.{id}:7000"),
        resources: ResourceSet::cpu(Quantity::from_units(4)).with("tpu", Quantity::from_raw(5)),
        labels: BTreeMap::from([("zone".to_owned(), format!("z{}", id % 2))]),
    }
}

pub(crate) fn job(id: u32) -> JobInfo {
    JobInfo {
        id: JobId(id),
        driver: format!("driver-{id}"),
        started_at: Duration::from_secs(1),
    }
}

pub(crate) fn actor_id(seq: u64) -> ActorId {
    ActorId::new(WorkerId(1), seq)
}

/// An unnamed, non-detached actor of `job` with no restarts.
pub(crate) fn actor(seq: u64, job: u32) -> ActorInfo {
    ActorInfo {
        id: actor_id(seq),
        class_name: "Counter".to_owned(),
        name: None,
        namespace: "default".to_owned(),
        job: JobId(job),
        detached: false,
        max_restarts: 0,
    }
}

pub(crate) fn named(mut info: ActorInfo, namespace: &str, name: &str) -> ActorInfo {
    info.namespace = namespace.to_owned();
    info.name = Some(name.to_owned());
    info
}
