//! The state API's answers from one driver or worker: the tasks it owns
//! that have not finished, and the objects it owns.

use ray_proto::wire::{Message, ObjectRow};

use super::ClusterCore;
use crate::ownership::Value;

/// Answers `ListTasks` / `ListObjects`.
pub(super) fn answer(core: &ClusterCore, msg: Message) -> Message {
    match msg {
        Message::ListTasks => Message::Tasks {
            tasks: core.owner.lock().task_rows(),
        },
        Message::ListObjects => {
            let Some(rt) = core.rt() else {
                return Message::Objects {
                    objects: Vec::new(),
                };
            };
            let objects = rt
                .objects
                .snapshot()
                .into_iter()
                .map(|(object, value)| {
                    let (state, bytes) = match value {
                        None => ("PENDING", None),
                        Some(Value::Inline(buf)) => ("INLINE", Some(buf.len() as u64)),
                        Some(Value::Stored) => {
                            ("STORED", rt.store.get(object).map(|b| b.len() as u64))
                        }
                        Some(Value::Failed(_)) => ("FAILED", None),
                    };
                    ObjectRow {
                        object,
                        state: state.into(),
                        bytes,
                    }
                })
                .collect();
            Message::Objects { objects }
        }
        other => Message::Error {
            reason: format!("not a state request: {other:?}"),
        },
    }
}
