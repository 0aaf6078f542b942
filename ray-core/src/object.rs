//! What can be an object: any rkyv-archivable value, and how values become
//! bytes and back.
//!
//! Encoding records the [`ObjectRef`](crate::ObjectRef)s nested inside a
//! value, so the object that contains them keeps them alive (Ray's
//! "contained refs"). Decoding needs the runtime that owns those refs; it is
//! passed through a thread-local for the duration of one decode.

use std::cell::RefCell;
use std::sync::Arc;

use ray_store::{EncodeBuffer, ObjectBuffer};
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::{Archive, Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ownership::RefHandle;
use crate::runtime::Runtime;

/// A value that can be stored as an object, passed as an argument or returned
/// from a task: anything rkyv can archive, check and deserialize.
///
/// Implemented automatically; derive `rkyv::{Archive, Serialize, Deserialize}`
/// on your types to make them objects.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a ray-rs object (argument, return value or put)",
    label = "not archivable by rkyv",
    note = "derive `rkyv::Archive, rkyv::Serialize, rkyv::Deserialize` on `{Self}` (and on the types inside it)"
)]
pub trait Object: Archive + Send + 'static {
    #[doc(hidden)]
    fn __encode(&self) -> Result<EncodeBuffer, rancor::Error>;
    #[doc(hidden)]
    fn __decode(bytes: &[u8]) -> Result<Self, rancor::Error>
    where
        Self: Sized;
    #[doc(hidden)]
    fn __access(bytes: &[u8]) -> Result<&Self::Archived, rancor::Error>;
}

impl<T> Object for T
where
    T: Archive + Send + 'static,
    T: for<'a> Serialize<HighSerializer<EncodeBuffer, ArenaHandle<'a>, rancor::Error>>,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + Deserialize<T, HighDeserializer<rancor::Error>>,
{
    fn __encode(&self) -> Result<EncodeBuffer, rancor::Error> {
        rkyv::api::high::to_bytes_in(self, EncodeBuffer::new())
    }

    fn __decode(bytes: &[u8]) -> Result<Self, rancor::Error> {
        rkyv::from_bytes::<T, rancor::Error>(bytes)
    }

    fn __access(bytes: &[u8]) -> Result<&Self::Archived, rancor::Error> {
        rkyv::access::<T::Archived, rancor::Error>(bytes)
    }
}

/// A value turned into bytes, with the refs found inside it.
pub(crate) struct Encoded {
    pub(crate) buf: ObjectBuffer,
    pub(crate) nested: Vec<Arc<RefHandle>>,
}

thread_local! {
    /// Refs met while encoding on this thread; `None` when not encoding.
    static NESTED: RefCell<Option<Vec<Arc<RefHandle>>>> = const { RefCell::new(None) };
    /// The runtime that decoded refs belong to; `None` when not decoding.
    static DECODE_RT: RefCell<Option<Arc<Runtime>>> = const { RefCell::new(None) };
}

/// Encodes `value`, collecting the refs nested in it.
pub(crate) fn encode<T: Object>(value: &T, what: &str) -> Result<Encoded> {
    let prev = NESTED.with(|n| n.borrow_mut().replace(Vec::new()));
    let bytes = value.__encode();
    let nested = NESTED
        .with(|n| std::mem::replace(&mut *n.borrow_mut(), prev))
        .unwrap_or_default();
    let bytes = bytes.map_err(|e| Error::Serialization {
        op: "encode",
        what: what.to_string(),
        message: codec_message("encode", &e),
    })?;
    Ok(Encoded {
        buf: bytes.into_buffer(),
        nested,
    })
}

/// The codec's message, with a reason in place of rkyv's placeholder for
/// an error it keeps no detail of ("failed without error information"):
/// for an encode, nearly always a value over the 2 GiB − 1 an archive's
/// 32-bit offsets reach; for a decode, bytes that are not an archive of
/// the type.
fn codec_message(op: &str, e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    if !text.contains("without error information") {
        return text;
    }
    match op {
        "encode" => "the encoding failed; an object's encoding is limited to 2 GiB − 1 \
                     (rkyv's 32-bit offsets): a larger value cannot be one object"
            .to_string(),
        _ => "the bytes are not a valid archive of this type".to_string(),
    }
}

/// Called by `ObjectRef`'s serializer: remembers a nested ref.
pub(crate) fn note_nested(handle: &Arc<RefHandle>) {
    NESTED.with(|n| {
        if let Some(v) = n.borrow_mut().as_mut() {
            v.push(handle.clone());
        }
    });
}

/// Decodes a `T` whose nested refs belong to `rt`.
pub(crate) fn decode<T: Object>(rt: &Arc<Runtime>, bytes: &[u8], what: &str) -> Result<T> {
    let prev = DECODE_RT.with(|d| d.borrow_mut().replace(rt.clone()));
    let out = T::__decode(bytes);
    DECODE_RT.with(|d| *d.borrow_mut() = prev);
    out.map_err(|e| Error::Serialization {
        op: "decode",
        what: what.to_string(),
        message: codec_message("decode", &e),
    })
}

/// Decodes a value that holds no refs (errors, for example), outside any runtime.
pub(crate) fn decode_plain<T: Object>(bytes: &[u8]) -> Result<T> {
    T::__decode(bytes).map_err(|e| Error::Serialization {
        op: "decode",
        what: std::any::type_name::<T>().to_string(),
        message: e.to_string(),
    })
}

/// The runtime of the decode in progress on this thread.
pub(crate) fn decoding_runtime() -> Option<Arc<Runtime>> {
    DECODE_RT.with(|d| d.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::codec_message;

    #[test]
    fn rkyvs_placeholder_becomes_a_reason_and_other_messages_stay() {
        let placeholder = "failed without error information; enable debug assertions and the `alloc` feature in rancor for error information";
        assert!(codec_message("encode", &placeholder).contains("2 GiB"));
        assert_eq!(
            codec_message("decode", &placeholder),
            "the bytes are not a valid archive of this type"
        );
        assert_eq!(codec_message("decode", &"invalid UTF-8"), "invalid UTF-8");
    }
}
