//! `ObjectRef<T>`: a typed, counted reference to an immutable object.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ray_proto::{ArchivedObjectId, ObjectId};
use ray_store::ObjectBuffer;
use rkyv::rancor::{Fallible, Source};
use rkyv::{Archive, Deserialize, Place, Serialize};

use crate::context::{begin_blocking, BlockGuard};
use crate::error::{Error, Result};
use crate::object::{self, Object};
use crate::ownership::RefHandle;

/// A reference to an immutable object of type `T`, owned by the worker that
/// created it.
///
/// Cloning is cheap and counts as a reference; the object is freed when the
/// last reference anywhere (handles, task arguments, objects containing it)
/// is dropped. An `ObjectRef` can be passed to a remote function in place of
/// a `T` (it is resolved before the callee runs) or nested inside a value
/// (it then travels by reference).
pub struct ObjectRef<T> {
    pub(crate) handle: Arc<RefHandle>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for ObjectRef<T> {
    fn clone(&self) -> Self {
        Self::from_handle(self.handle.clone())
    }
}

impl<T> fmt::Debug for ObjectRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectRef({})", self.handle.id)
    }
}

impl<T> PartialEq for ObjectRef<T> {
    fn eq(&self, other: &Self) -> bool {
        self.handle.id == other.handle.id
    }
}

impl<T> Eq for ObjectRef<T> {}

impl<T> ObjectRef<T> {
    pub(crate) fn from_handle(handle: Arc<RefHandle>) -> Self {
        Self {
            handle,
            _t: PhantomData,
        }
    }

    /// The object's id.
    pub fn id(&self) -> ObjectId {
        self.handle.id
    }

    /// Whether the value (or the error) is there, without waiting.
    pub fn is_ready(&self) -> bool {
        self.handle.is_ready()
    }

    /// Records an `object.get` (insight's data edges); `arg`: read as a
    /// task's argument rather than by `get`.
    pub(crate) fn trace_get_as(&self, bytes: usize, arg: bool) {
        crate::trace::object(true, self.handle.id, bytes, self.handle.rt.node, arg);
    }

    fn trace_get(&self, bytes: usize) {
        self.trace_get_as(bytes, false);
    }

    /// The raw bytes, once ready. Inside a task, waiting gives its CPU back.
    pub(crate) async fn buffer(&self) -> Result<ObjectBuffer> {
        ReadyFuture {
            handle: &self.handle,
            guard: None,
        }
        .await
    }
}

impl<T: Object> ObjectRef<T> {
    /// Waits for the object and returns a deserialized copy.
    ///
    /// Fails with the producing task's error if it failed.
    pub async fn get(&self) -> Result<T> {
        let buf = self.buffer().await?;
        self.trace_get(buf.len());
        object::decode::<T>(&self.handle.rt, buf.as_bytes(), std::any::type_name::<T>())
    }

    /// Like [`get`](Self::get), but fails with [`Error::Timeout`] after `timeout`.
    ///
    /// Works on any executor and thread (tokio, a sync task, a plain
    /// thread): the deadline does not need a tokio reactor.
    pub async fn get_timeout(&self, timeout: Duration) -> Result<T> {
        crate::timer::timeout(timeout, self.get())
            .await
            .unwrap_or(Err(Error::Timeout(timeout)))
    }

    /// Blocking [`get_timeout`](Self::get_timeout), for code that is not
    /// async: a sync remote function, an actor method, a plain thread.
    pub fn get_timeout_blocking(&self, timeout: Duration) -> Result<T> {
        futures::executor::block_on(self.get_timeout(timeout))
    }

    /// Waits for the object and returns a zero-copy view of its archive:
    /// no copy, no deserialization, valid as long as the view lives.
    pub async fn get_archived(&self) -> Result<ArchivedRef<T>> {
        let buf = self.buffer().await?;
        self.trace_get(buf.len());
        ArchivedRef::new(buf)
    }

    /// Blocking [`get`](Self::get), for code that is not async.
    ///
    /// Must not be called from inside an async runtime's worker thread.
    pub fn get_blocking(&self) -> Result<T> {
        futures::executor::block_on(self.get())
    }

    /// Blocking [`get_archived`](Self::get_archived).
    pub fn get_archived_blocking(&self) -> Result<ArchivedRef<T>> {
        futures::executor::block_on(self.get_archived())
    }
}

/// An [`ObjectRef`] whose value type is forgotten, so refs of different
/// types can share one list (for [`Ray::wait`](crate::Ray::wait), as Ray's
/// `wait` mixes anything).
///
/// It counts as a reference like the typed ref it came from. Turn it back
/// with [`AnyRef::typed`], as the type it was made with.
#[derive(Clone)]
pub struct AnyRef {
    pub(crate) handle: Arc<RefHandle>,
}

impl AnyRef {
    /// The object's id.
    pub fn id(&self) -> ObjectId {
        self.handle.id
    }

    /// Whether the value (or the error) is there, without waiting.
    pub fn is_ready(&self) -> bool {
        self.handle.is_ready()
    }

    /// The typed ref again. Objects carry no type tag: read as the wrong
    /// type, the value fails validation ([`Error::Serialization`]) or, where
    /// the bytes happen to be a valid value of that type too (a `u64` read
    /// as an `i64`), reads as a meaningless value; never undefined
    /// behaviour.
    pub fn typed<T>(self) -> ObjectRef<T> {
        ObjectRef::from_handle(self.handle)
    }
}

impl<T> From<ObjectRef<T>> for AnyRef {
    fn from(r: ObjectRef<T>) -> Self {
        Self { handle: r.handle }
    }
}

impl<T> From<&ObjectRef<T>> for AnyRef {
    fn from(r: &ObjectRef<T>) -> Self {
        Self {
            handle: r.handle.clone(),
        }
    }
}

impl fmt::Debug for AnyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyRef({})", self.handle.id)
    }
}

impl PartialEq for AnyRef {
    fn eq(&self, other: &Self) -> bool {
        self.handle.id == other.handle.id
    }
}

impl Eq for AnyRef {}

/// A reference [`Ray::wait`](crate::Ray::wait) can wait on: an
/// [`ObjectRef<T>`] or an [`AnyRef`]. Sealed.
pub trait Waitable: Clone + sealed::Sealed {
    /// The object's id.
    fn object_id(&self) -> ObjectId;

    /// Whether the value (or the error) is there, without waiting.
    fn is_ready(&self) -> bool;
}

mod sealed {
    use super::*;

    /// What the runtime asks of a [`Waitable`](super::Waitable).
    pub trait Sealed {
        /// Whether the object is ready; if not, `waker` is woken when it is.
        fn poll_ready(&self, waker: &std::task::Waker) -> bool;
    }

    impl<T> Sealed for ObjectRef<T> {
        fn poll_ready(&self, waker: &std::task::Waker) -> bool {
            self.handle.poll(Some(waker)).is_ready()
        }
    }

    impl Sealed for AnyRef {
        fn poll_ready(&self, waker: &std::task::Waker) -> bool {
            self.handle.poll(Some(waker)).is_ready()
        }
    }
}

impl<T> Waitable for ObjectRef<T> {
    fn object_id(&self) -> ObjectId {
        self.handle.id
    }

    fn is_ready(&self) -> bool {
        self.handle.is_ready()
    }
}

impl Waitable for AnyRef {
    fn object_id(&self) -> ObjectId {
        self.handle.id
    }

    fn is_ready(&self) -> bool {
        self.handle.is_ready()
    }
}

/// How long a driver's first poll of a pending object spins before it parks.
pub(crate) const GET_SPIN: Duration = Duration::from_micros(10);

/// Waits until an object has a value; inside a task, marks it blocked.
struct ReadyFuture<'a> {
    handle: &'a Arc<RefHandle>,
    guard: Option<Option<BlockGuard>>,
}

impl Future for ReadyFuture<'_> {
    type Output = Result<ObjectBuffer>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let rt = &self.handle.rt;
        let id = self.handle.id;
        if self.guard.is_none() {
            // One look first: a ready object (most of a `get_all` over
            // finished work) costs a single look at its cell.
            if let Poll::Ready(value) = self.handle.poll(None) {
                return Poll::Ready(rt.read_value(id, value));
            }
        }
        let spin = rt.settings.get_spin;
        if !spin.is_zero()
            && self.guard.is_none()
            && !crate::context::in_task()
            && rt.pool.has_idle_core()
        {
            // A driver waiting on a short task, with a core to spare: a few
            // microseconds of spinning usually see it finish, saving a park
            // and a wake-up. With every core busy it would only slow them.
            let deadline = std::time::Instant::now() + spin;
            while !self.handle.is_ready() && std::time::Instant::now() < deadline {
                std::hint::spin_loop();
            }
        }
        match self.handle.poll(Some(cx.waker())) {
            Poll::Ready(value) => {
                self.guard = None;
                Poll::Ready(rt.read_value(id, value))
            }
            Poll::Pending => {
                if self.guard.is_none() {
                    self.guard = Some(begin_blocking(&[id]));
                }
                Poll::Pending
            }
        }
    }
}

/// A zero-copy view of an object's rkyv archive.
///
/// Derefs to `T::Archived`. Holding it pins the object's bytes.
pub struct ArchivedRef<T: Object> {
    buf: ObjectBuffer,
    _t: PhantomData<fn() -> T>,
}

impl<T: Object> ArchivedRef<T> {
    pub(crate) fn new(buf: ObjectBuffer) -> Result<Self> {
        // Validate once; every later access trusts these immutable bytes.
        T::__access(buf.as_bytes()).map_err(|e| Error::Serialization {
            op: "access",
            what: std::any::type_name::<T>().to_string(),
            message: e.to_string(),
        })?;
        Ok(Self {
            buf,
            _t: PhantomData,
        })
    }

    /// The underlying bytes.
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_bytes()
    }
}

impl<T: Object> Deref for ArchivedRef<T> {
    type Target = T::Archived;

    fn deref(&self) -> &T::Archived {
        // SAFETY: `new` validated these exact bytes as a `T::Archived` with
        // bytecheck, and an `ObjectBuffer` is immutable and 16-aligned for
        // as long as this view holds it. Re-validating on every deref would
        // make a zero-copy view cost O(size) per access.
        unsafe { rkyv::access_unchecked::<T::Archived>(self.buf.as_bytes()) }
    }
}

impl<T: Object> fmt::Debug for ArchivedRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ArchivedRef<{}>({} bytes)",
            std::any::type_name::<T>(),
            self.buf.len()
        )
    }
}

// `ObjectRef<T>` archives as the object's id. Serializing records the ref as
// nested in the value being encoded; deserializing makes a new counted
// reference in the runtime doing the decode.

impl<T> Archive for ObjectRef<T> {
    type Archived = ArchivedObjectId;
    type Resolver = <ObjectId as Archive>::Resolver;

    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        self.handle.id.resolve(resolver, out)
    }
}

impl<T, S: Fallible + ?Sized> Serialize<S> for ObjectRef<T> {
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        object::note_nested(&self.handle);
        self.handle.id.serialize(serializer)
    }
}

#[derive(Debug)]
struct NestedRefError(ObjectId, &'static str);

impl fmt::Display for NestedRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nested ObjectRef {}: {}", self.0, self.1)
    }
}

impl std::error::Error for NestedRefError {}

impl<T, D> Deserialize<ObjectRef<T>, D> for ArchivedObjectId
where
    D: Fallible + ?Sized,
    D::Error: Source,
{
    fn deserialize(&self, deserializer: &mut D) -> Result<ObjectRef<T>, D::Error> {
        let id: ObjectId = Deserialize::<ObjectId, D>::deserialize(self, deserializer)?;
        let Some(rt) = object::decoding_runtime() else {
            return Err(D::Error::new(NestedRefError(
                id,
                "decoded outside a ray-rs runtime",
            )));
        };
        match rt.objects.handle(id) {
            Some(handle) => Ok(ObjectRef::from_handle(handle)),
            // Owned by another process of the cluster: borrow it.
            None if id.owner != rt.worker => match rt.remote.get() {
                Some(remote) => Ok(ObjectRef::from_handle(remote.borrow(&rt, id))),
                None => Err(D::Error::new(NestedRefError(id, "no longer exists"))),
            },
            None => Err(D::Error::new(NestedRefError(id, "no longer exists"))),
        }
    }
}

/// One argument of a task, made by [`IntoArg`]: a value or a reference.
pub struct TaskArg(pub(crate) ArgKind);

/// What a [`TaskArg`] holds.
pub(crate) enum ArgKind {
    /// An encoded value, with the refs nested in it kept alive.
    Value(ObjectBuffer, #[allow(dead_code)] Vec<Arc<RefHandle>>),
    /// A reference, resolved before the callee runs.
    Ref(Arc<RefHandle>),
}

/// Something that can be passed where a remote function expects a `T`:
/// a `T` itself, an `ObjectRef<T>`, or `&ObjectRef<T>`.
pub trait IntoArg<T> {
    /// Turns `self` into a task argument.
    fn into_arg(self) -> Result<TaskArg>;
}

impl<T: Object> IntoArg<T> for T {
    fn into_arg(self) -> Result<TaskArg> {
        let enc = object::encode(&self, std::any::type_name::<T>())?;
        Ok(TaskArg(ArgKind::Value(enc.buf, enc.nested)))
    }
}

/// A `&str` where a remote function takes a `String`.
impl IntoArg<String> for &str {
    fn into_arg(self) -> Result<TaskArg> {
        let enc = object::encode(&self.to_string(), "alloc::string::String")?;
        Ok(TaskArg(ArgKind::Value(enc.buf, enc.nested)))
    }
}

impl<T> IntoArg<T> for ObjectRef<T> {
    fn into_arg(self) -> Result<TaskArg> {
        Ok(TaskArg(ArgKind::Ref(self.handle)))
    }
}

impl<T> IntoArg<T> for &ObjectRef<T> {
    fn into_arg(self) -> Result<TaskArg> {
        Ok(TaskArg(ArgKind::Ref(self.handle.clone())))
    }
}
