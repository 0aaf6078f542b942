//! State from code: the cluster's nodes and resources, and who is calling
//! (Ray's `ray.nodes()`, `ray.cluster_resources()`,
//! `ray.available_resources()`, `ray.get_runtime_context()`).
//!
//! Embedded, the one node is this process; on a cluster the answers come
//! from the GCS's node table (each node's load as of its last heartbeat).

use std::collections::BTreeMap;

use ray_proto::{ActorId, JobId, NodeId, TaskId, WorkerId};
use ray_sched::ResourceSet;

use crate::error::Result;
use crate::ray::Ray;

/// One node of the cluster, as [`Ray::nodes`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeState {
    /// The node's id.
    pub id: NodeId,
    /// Where its daemon listens (`"embedded"` for the embedded node).
    pub address: String,
    /// Whether it is part of the cluster now.
    pub alive: bool,
    /// Why it left the cluster, when it did.
    pub death_cause: Option<String>,
    /// Its total resources.
    pub total: ResourceSet,
    /// Its resources not in use (zero for a dead node).
    pub available: ResourceSet,
    /// Its labels (`rayrs start --labels`).
    pub labels: BTreeMap<String, String>,
}

/// Who is calling: the ids Ray's `get_runtime_context()` gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContext {
    /// The job this process belongs to.
    pub job: JobId,
    /// The node this process runs on.
    pub node: NodeId,
    /// This process's worker id (the driver's, in the driver).
    pub worker: WorkerId,
    /// The task or actor call running on this thread, if any.
    pub task: Option<TaskId>,
    /// The actor whose constructor or method runs on this thread, if any.
    pub actor: Option<ActorId>,
}

impl Ray {
    /// Every node of the cluster, alive or dead, by id.
    ///
    /// # Errors
    ///
    /// [`Error::ShutDown`](crate::Error::ShutDown) after
    /// [`shutdown`](Ray::shutdown), in both modes; on a cluster,
    /// [`Error::Cluster`](crate::Error::Cluster) if the GCS cannot be asked.
    pub async fn nodes(&self) -> Result<Vec<NodeState>> {
        self.rt.check_running()?;
        match self.rt.remote.get() {
            Some(remote) => remote.nodes().await,
            None => Ok(vec![self.embedded_node()]),
        }
    }

    /// The total resources of the cluster's live nodes.
    ///
    /// # Errors
    ///
    /// As [`nodes`](Self::nodes).
    pub async fn cluster_resources(&self) -> Result<ResourceSet> {
        Ok(sum(self
            .nodes()
            .await?
            .iter()
            .filter(|n| n.alive)
            .map(|n| &n.total)))
    }

    /// The resources of the cluster's live nodes not in use now.
    ///
    /// # Errors
    ///
    /// As [`nodes`](Self::nodes).
    pub async fn available_resources(&self) -> Result<ResourceSet> {
        Ok(sum(self
            .nodes()
            .await?
            .iter()
            .filter(|n| n.alive)
            .map(|n| &n.available)))
    }

    /// Who is calling: job, node and worker of this process, and the task
    /// and actor running on this thread.
    pub fn runtime_context(&self) -> RuntimeContext {
        let (task, actor) = crate::context::current_ids().unwrap_or((None, None));
        RuntimeContext {
            job: self.rt.job,
            node: self.rt.node,
            worker: self.rt.worker,
            task,
            actor,
        }
    }

    /// The embedded runtime's one node.
    fn embedded_node(&self) -> NodeState {
        let available = self.rt.sched.lock().resources().available();
        NodeState {
            id: self.rt.node,
            address: "embedded".into(),
            alive: !self.rt.is_shut_down(),
            death_cause: None,
            total: self.rt.node_total.clone(),
            available,
            labels: self.rt.settings.node_labels.clone(),
        }
    }
}

/// The sum of `sets`.
fn sum<'a>(sets: impl Iterator<Item = &'a ResourceSet>) -> ResourceSet {
    let mut total = ResourceSet::new();
    for set in sets {
        total.add_assign(set);
    }
    total
}
