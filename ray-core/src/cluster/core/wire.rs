//! Conversions between the runtime's types and their wire forms
//! (strategies, errors, addresses), and the bounded interner of names that
//! crossed the wire.

use super::*;

pub(super) fn aligned(bytes: &[u8]) -> rkyv::util::AlignedVec<16> {
    let mut v = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}

pub(super) fn parse_addr(s: &str) -> Result<SocketAddr, Error> {
    s.parse()
        .map_err(|e| Error::cluster_from(format!("bad peer address {s:?}"), e))
}

pub(super) fn missing(id: u64, what: &str) -> Error {
    Error::cluster(format!(
        "{what} {id:016x} is not in this worker's binary (the job binary and the driver differ)"
    ))
}

/// `strategy` in wire form.
pub(crate) fn strategy_to_wire(strategy: &SchedulingStrategy) -> WireStrategy {
    match strategy {
        SchedulingStrategy::Default => WireStrategy::Default,
        SchedulingStrategy::Spread => WireStrategy::Spread,
        SchedulingStrategy::NodeAffinity { node, soft } => WireStrategy::NodeAffinity {
            node: *node,
            soft: *soft,
        },
        SchedulingStrategy::PlacementGroup { group, bundle } => WireStrategy::PlacementGroup {
            group: *group,
            bundle: bundle.map(|b| b as u32),
        },
        SchedulingStrategy::Locality => WireStrategy::Locality,
    }
}

/// The scheduling strategy a wire form describes.
pub(crate) fn strategy_from_wire(strategy: &WireStrategy) -> SchedulingStrategy {
    match strategy {
        WireStrategy::Default => SchedulingStrategy::Default,
        WireStrategy::Locality => SchedulingStrategy::Locality,
        WireStrategy::Spread => SchedulingStrategy::Spread,
        WireStrategy::NodeAffinity { node, soft } => SchedulingStrategy::NodeAffinity {
            node: *node,
            soft: *soft,
        },
        WireStrategy::PlacementGroup { group, bundle } => SchedulingStrategy::PlacementGroup {
            group: *group,
            bundle: bundle.map(|b| b as usize),
        },
    }
}

/// `e` in wire form.
pub(crate) fn error_to_wire(e: &Error) -> WireError {
    let mut w = WireError {
        kind: ErrorKind::Other,
        task: None,
        actor: None,
        object: None,
        name: String::new(),
        message: e.to_string(),
        type_name: String::new(),
        payload: Vec::new(),
    };
    match e {
        Error::TaskPanicked {
            task,
            function,
            message,
        } => {
            w.kind = ErrorKind::TaskPanicked;
            w.task = Some(*task);
            w.name = function.to_string();
            w.message = message.clone();
        }
        Error::TaskFailed {
            task,
            function,
            error,
        } => {
            w.kind = ErrorKind::TaskFailed;
            w.task = Some(*task);
            w.name = function.to_string();
            w.message = error.message().to_string();
            w.type_name = error.type_name().to_string();
            w.payload = error.payload().as_bytes().to_vec();
        }
        Error::ActorDied {
            actor,
            class,
            cause,
        } => {
            w.kind = ErrorKind::ActorDied;
            w.actor = Some(*actor);
            w.name = class.to_string();
            w.message = cause.clone();
        }
        Error::ObjectLost { object, cause } => {
            w.kind = ErrorKind::ObjectLost;
            w.object = Some(*object);
            w.message = cause.clone();
        }
        // The owner is the object id's own: it need not travel.
        Error::OwnerDied { object, cause, .. } => {
            w.kind = ErrorKind::OwnerDied;
            w.object = Some(*object);
            w.message = cause.clone();
        }
        Error::ShutDown => w.kind = ErrorKind::ShutDown,
        // What failed to encode or decode, and which it was, so a task's
        // argument that does not decode is `Serialization` on a cluster
        // too, as embedded.
        Error::Serialization { op, what, message } => {
            w.kind = ErrorKind::Serialization;
            w.type_name = what.clone();
            w.message = message.clone();
            w.payload = op.as_bytes().to_vec();
        }
        _ => {}
    }
    fit_in_a_message(&mut w);
    w
}

/// Most bytes of an error's message that travel.
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Keeps `w` within a work message: a message over [`MAX_MESSAGE_BYTES`]
/// is cut (at a character boundary, saying so), and a payload (a user
/// error's value) over
/// [`MAX_INLINE_MESSAGE_BYTES`](crate::runtime::MAX_INLINE_MESSAGE_BYTES)
/// is dropped, saying so (its `downcast` then finds nothing): one over
/// the transport's cap would end the work stream it shares with other
/// work.
fn fit_in_a_message(w: &mut WireError) {
    if w.payload.len() > crate::runtime::MAX_INLINE_MESSAGE_BYTES {
        let dropped = w.payload.len();
        w.payload = Vec::new();
        w.message.push_str(&format!(
            " (its error value of {dropped} bytes was too large to send)"
        ));
    }
    if w.message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !w.message.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = w.message.len();
        w.message.truncate(cut);
        w.message
            .push_str(&format!("… (cut: {total} bytes in all)"));
    }
}

/// The typed error a wire form describes; `name` is the function, method
/// or class the receiver knows the work by.
pub(crate) fn error_from_wire(w: WireError, name: &'static str) -> Error {
    // The name the error was made with wins: a task whose argument failed
    // upstream reports the upstream function, not itself. `name` (what
    // this process pushed) stands in when the peer did not know it.
    let name = if w.name.is_empty() || w.name == name {
        name
    } else {
        intern(&w.name)
    };
    match (w.kind, w.task, w.actor, w.object) {
        (ErrorKind::TaskPanicked, Some(task), ..) => Error::TaskPanicked {
            task,
            function: name,
            message: w.message,
        },
        (ErrorKind::TaskFailed, Some(task), ..) => Error::TaskFailed {
            task,
            function: name,
            error: UserError::from_wire(
                intern(&w.type_name),
                w.message,
                ObjectBuffer::from_aligned(aligned(&w.payload)),
            ),
        },
        (ErrorKind::ActorDied, _, Some(actor), _) => Error::ActorDied {
            actor,
            class: name,
            cause: w.message,
        },
        (ErrorKind::ObjectLost, _, _, Some(object)) => Error::ObjectLost {
            object,
            cause: w.message,
        },
        (ErrorKind::OwnerDied, _, _, Some(object)) => Error::OwnerDied {
            object,
            owner: object.owner,
            cause: w.message,
        },
        (ErrorKind::ShutDown, ..) => Error::ShutDown,
        (ErrorKind::Serialization, ..) => Error::Serialization {
            op: match &w.payload[..] {
                b"encode" => "encode",
                b"access" => "access",
                _ => "decode",
            },
            what: w.type_name,
            message: w.message,
        },
        // Only the text crossed the wire: no typed source.
        _ => Error::cluster(w.message),
    }
}

/// The most bytes of names [`intern`] keeps for the life of the process.
const INTERNED_BYTES: usize = 1 << 20;

/// What [`intern`] returns for a new name once [`INTERNED_BYTES`] are kept.
pub(super) const NOT_INTERNED: &str = "(name dropped: too many distinct names from peers)";

/// Names kept by [`intern`], and their bytes.
#[derive(Default)]
pub(super) struct Interner {
    names: hashbrown::HashSet<&'static str>,
    bytes: usize,
}

impl Interner {
    /// `s` as a `'static` name: the kept copy, a new leaked copy while
    /// fewer than `cap` bytes are kept, else [`NOT_INTERNED`].
    pub(super) fn get(&mut self, s: &str, cap: usize) -> &'static str {
        if let Some(n) = self.names.get(s) {
            return n;
        }
        if self.bytes + s.len() > cap {
            return NOT_INTERNED;
        }
        let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
        self.bytes += n.len();
        self.names.insert(n);
        n
    }
}

/// A `'static` copy of a name that crossed the wire (function, class and
/// error type names, which the runtime's types hold as `&'static str`).
/// Each distinct name is leaked once; names come from peers, so the total
/// is bounded ([`INTERNED_BYTES`]) and a peer sending ever new names gets
/// [`NOT_INTERNED`] instead of growing this process without end.
pub(super) fn intern(s: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<Interner>> = OnceLock::new();
    NAMES
        .get_or_init(Default::default)
        .lock()
        .get(s, INTERNED_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interner_keeps_each_name_once_and_stops_at_its_bound() {
        let mut names = Interner::default();
        let a = names.get("Counter", 16);
        assert_eq!(a, "Counter");
        assert!(
            std::ptr::eq(a, names.get("Counter", 16)),
            "one copy per name"
        );
        assert_eq!(names.get("Worker", 16), "Worker");
        // 13 bytes kept: a 4-byte name passes the 16-byte bound.
        assert_eq!(names.get("Node", 16), NOT_INTERNED);
        assert_eq!(
            names.get("Counter", 16),
            "Counter",
            "kept names still answer"
        );
        assert_eq!(names.bytes, 13);
    }
}
