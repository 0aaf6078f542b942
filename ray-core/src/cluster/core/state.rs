//! The state API's answers from one driver or worker: the tasks it owns
//! that have not finished, and the objects it owns.

use ray_proto::wire::{ObjectRow, Objects, Tasks};

use super::ClusterCore;
use crate::ownership::Value;

/// The answer to `ListTasks`: the tasks this process owns that have not
/// finished.
pub(super) fn tasks(core: &ClusterCore) -> Tasks {
    Tasks {
        tasks: core.owner.lock().task_rows(),
    }
}

/// The answer to `ListObjects`: the objects this process owns.
pub(super) fn objects(core: &ClusterCore) -> Objects {
    let Some(rt) = core.rt() else {
        return Objects {
            objects: Vec::new(),
        };
    };
    let objects = rt
        .objects
        .snapshot()
        .into_iter()
        // Actors' keys are no objects of the program's.
        .filter(|(object, _)| super::actors::actor_of_key(*object).is_none())
        .map(|(object, value)| {
            let (state, bytes) = match value {
                None => ("PENDING", None),
                Some(Value::Inline(buf)) => ("INLINE", Some(buf.len() as u64)),
                Some(Value::Stored) => ("STORED", rt.store.get(object).map(|b| b.len() as u64)),
                Some(Value::Failed(_)) => ("FAILED", None),
            };
            ObjectRow {
                object,
                state: state.into(),
                bytes,
            }
        })
        .collect();
    Objects { objects }
}
