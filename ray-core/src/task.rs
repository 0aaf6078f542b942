//! Tasks: the spec a submission produces and how the node runs it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::Mutex;

use ray_proto::TaskId;
use ray_sched::ResourceSet;
use ray_store::ObjectBuffer;

use crate::context;
use crate::error::Error;
use crate::object::Encoded;
use crate::object_ref::{ArgKind, ObjectRef, TaskArg};
use crate::ownership::{ObjectCell, Value};
use crate::placement::Pool;
use crate::registry::{InvokeError, RemoteFunction, Returned};
use crate::runtime::{Dispatch, Runtime};

/// A submitted task: what to run, on what, with which resources.
pub(crate) struct TaskSpec {
    pub(crate) task: TaskId,
    pub(crate) function: &'static RemoteFunction,
    pub(crate) args: Vec<TaskArg>,
    pub(crate) resources: ResourceSet,
    /// Where the resources come from (the node or a bundle).
    pub(crate) pool: Pool,
    pub(crate) max_retries: u32,
    pub(crate) retry_exceptions: crate::options::RetryExceptions,
    pub(crate) attempt: u32,
    pub(crate) parent: Option<TaskId>,
    /// The application span of its caller's it was submitted in, or 0
    /// (see [`crate::trace::user_span`]).
    pub(crate) parent_span: u64,
    /// The id insight records (see [`TaskSpec::trace_id`]); `None`: `task`.
    pub(crate) trace: Option<TaskId>,
    /// The return object's cell when this process owns it and runs the
    /// task: the result goes there without a table lookup.
    pub(crate) ret: Option<Arc<ObjectCell>>,
}

/// Refs among `args` whose values are not there yet.
pub(crate) fn pending_deps(args: &[TaskArg]) -> Vec<ObjectRef<()>> {
    args.iter()
        .filter_map(|a| match a {
            TaskArg(ArgKind::Ref(h)) if !h.is_ready() => Some(ObjectRef::from_handle(h.clone())),
            _ => None,
        })
        .collect()
}

/// Runs `then` once every ref in `deps` has a value or has failed: at once
/// if they all have, else on the thread whose completion of the last one
/// wakes it (the way a future waiting on them would be woken).
///
/// Work waiting for its arguments is then one allocation holding the work,
/// with no task of its own on the I/O runtime: 1,000,000 tasks queued on
/// one pending object took 948 bytes each with a tokio task per task,
/// 642 with this, and were admitted without a hop to the I/O thread.
pub(crate) fn when_ready<F>(deps: Vec<ObjectRef<()>>, then: F)
where
    F: FnOnce() + Send + 'static,
{
    let waiting = Waiting {
        deps,
        next: 0,
        then,
    };
    Arc::new(WhenReady(Mutex::new(Some(waiting)))).advance();
}

/// The state of one [`when_ready`]; `None` once `then` has run.
struct WhenReady<F>(Mutex<Option<Waiting<F>>>);

struct Waiting<F> {
    deps: Vec<ObjectRef<()>>,
    /// Deps before this one have values.
    next: usize,
    then: F,
}

impl<F: FnOnce() + Send + 'static> WhenReady<F> {
    /// Steps past deps that have values; runs `then` after the last, or
    /// leaves this as the waker of the first one still pending.
    fn advance(self: Arc<Self>) {
        let mut slot = self.0.lock();
        let Some(w) = slot.as_mut() else {
            // Already ran: a duplicate wake.
            return;
        };
        let waker = std::task::Waker::from(self.clone());
        while let Some(dep) = w.deps.get(w.next) {
            // A cell wakes its waiters after releasing its own lock, so
            // holding this slot's lock across the poll cannot deadlock
            // with the completion that wakes us.
            if dep.handle.poll(Some(&waker)).is_pending() {
                return;
            }
            w.next += 1;
        }
        let Some(Waiting { deps, then, .. }) = slot.take() else {
            return;
        };
        drop(slot);
        run_continuation(then);
        drop(deps);
    }
}

impl<F: FnOnce() + Send + 'static> std::task::Wake for WhenReady<F> {
    fn wake(self: Arc<Self>) {
        self.advance();
    }
}

type Continuation = Box<dyn FnOnce()>;

thread_local! {
    /// Continuations that became ready while one ran on this thread
    /// (`None`: none is running here).
    static DEFERRED: RefCell<Option<VecDeque<Continuation>>> = const { RefCell::new(None) };
}

/// Runs a [`when_ready`] continuation. One that a running continuation
/// makes ready (its work failed at once, completing an object that other
/// work waits on) runs after it, in order, on this thread: a long chain of
/// dependent work failing together (at shutdown) must not recurse once per
/// link. A panic is caught and logged, so the completion that woke it
/// still wakes the rest of its waiters.
fn run_continuation<F: FnOnce() + 'static>(then: F) {
    let mut then = Some(then);
    let outermost = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        match d.as_mut() {
            Some(queue) => {
                if let Some(f) = then.take() {
                    queue.push_back(Box::new(f));
                }
                false
            }
            None => {
                *d = Some(VecDeque::new());
                true
            }
        }
    });
    if !outermost {
        return;
    }
    fn guarded(f: impl FnOnce()) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
            tracing::error!(
                target: "ray::task",
                panic = %panic_message(payload.as_ref()),
                "work waiting for its arguments panicked while being admitted"
            );
        }
    }
    if let Some(f) = then {
        guarded(f);
    }
    while let Some(f) = DEFERRED.with(|d| d.borrow_mut().as_mut().and_then(VecDeque::pop_front)) {
        guarded(f);
    }
    DEFERRED.with(|d| *d.borrow_mut() = None);
}

/// Waits for (if needed) and collects the argument bytes.
///
/// A failed dependency fails the task with the dependency's error.
pub(crate) fn resolve_args(args: &[TaskArg]) -> Result<Vec<ObjectBuffer>, Error> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        match arg {
            TaskArg(ArgKind::Value(buf, _)) => out.push(buf.clone()),
            TaskArg(ArgKind::Ref(h)) => {
                let r = ObjectRef::<()>::from_handle(h.clone());
                let buf = futures::executor::block_on(r.buffer())?;
                // Argument resolution moves data too: insight's data edges.
                r.trace_get_as(buf.len(), true);
                out.push(buf);
            }
        }
    }
    Ok(out)
}

/// Runs user code, turning panics and user errors into [`Error`]s.
pub(crate) fn invoke_guarded(
    task: TaskId,
    name: &'static str,
    f: impl FnOnce() -> Result<Returned, InvokeError>,
) -> Result<Encoded, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(Returned(enc))) => Ok(enc),
        Ok(Err(InvokeError::User(error))) => Err(Error::TaskFailed {
            task,
            function: name,
            error,
        }),
        Ok(Err(InvokeError::Failed(e))) => Err(e),
        Err(payload) => Err(Error::TaskPanicked {
            task,
            function: name,
            message: panic_message(payload.as_ref()),
        }),
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl TaskSpec {
    /// The id insight records for this task: the owner's id, also when a
    /// worker runs it under an id of its own.
    pub(crate) fn trace_id(&self) -> TaskId {
        self.trace.unwrap_or(self.task)
    }
}

impl Runtime {
    /// Runs a task on this pool thread; its resources are already acquired.
    ///
    /// Returns work that the freed resources admitted, for this thread to
    /// run next: the thread that frees a CPU takes the next task without a
    /// round trip through the pool's queue.
    pub(crate) fn run_task(self: &Arc<Self>, mut spec: TaskSpec) -> Option<Dispatch> {
        let mut span = crate::trace::task_run(
            crate::trace::Run {
                task: spec.trace_id(),
                parent: spec.parent,
                parent_span: spec.parent_span,
                node: self.node,
                worker: self.worker,
            },
            spec.function.name,
            spec.attempt,
        );
        let outcome = context::with_task(
            self,
            spec.task,
            spec.trace_id(),
            None,
            Some((spec.pool.clone(), spec.resources.clone())),
            || {
                let args = resolve_args(&spec.args)?;
                invoke_guarded(spec.task, spec.function.name, || {
                    (spec.function.invoke)(&args)
                })
            },
        );
        if let Err(e) = &outcome {
            span.failed(e);
        }
        match outcome {
            Err(e) if spec.attempt < spec.max_retries && spec.retry_exceptions.covers(&e) => {
                // This run ends here, before its retry can start on another
                // thread: the views see one run close before the next opens.
                drop(span);
                spec.attempt += 1;
                tracing::debug!(target: "ray::task", task_id = %spec.task, attempt = spec.attempt, error = %e, "task.retry");
                let next = self.release_to_take_next(&spec.pool, &spec.resources);
                self.admit(spec);
                next
            }
            outcome => {
                // Release argument refs and resources before the result is
                // visible, so a caller that saw the result sees both back.
                let TaskSpec {
                    task,
                    resources,
                    pool,
                    args,
                    ret,
                    ..
                } = spec;
                drop(args);
                let next = self.release_to_take_next(&pool, &resources);
                self.complete_object_in(task.return_object(), ret.as_deref(), outcome);
                next
            }
        }
    }

    /// Sets an object's value from a task outcome, storing large values.
    pub(crate) fn complete_object(
        self: &Arc<Self>,
        id: ray_proto::ObjectId,
        outcome: Result<Encoded, Error>,
    ) {
        self.complete_object_in(id, None, outcome);
    }

    /// [`Runtime::complete_object`], through the object's cell when the
    /// caller has it (else the table finds it by id).
    ///
    /// A large value that finds the store full waits up to `put_timeout`
    /// for room. On a thread of an async runtime (the cluster's I/O, where
    /// fetched results land) that wait is not made there: blocking it
    /// would stall the runtime, timers included, and with them the wait
    /// itself and every message of the process; the object completes when
    /// the put does, or fails with `ObjectStoreFull` at its timeout, as on
    /// a pool thread.
    pub(crate) fn complete_object_in(
        self: &Arc<Self>,
        id: ray_proto::ObjectId,
        cell: Option<&ObjectCell>,
        outcome: Result<Encoded, Error>,
    ) {
        let (value, nested) = match outcome {
            Ok(enc) => match self.store_value_now(id, enc.buf) {
                Ok(Ok(v)) => (v, enc.nested),
                Ok(Err(buf)) => {
                    let rt = self.clone();
                    let nested = enc.nested;
                    let timeout = self.settings.put_timeout;
                    self.tokio.spawn(async move {
                        let (value, nested) = match rt.store.put(id, buf, timeout).await {
                            Ok(()) | Err(ray_store::StoreError::AlreadyExists { .. }) => {
                                (Value::Stored, nested)
                            }
                            Err(e) => (Value::Failed(Box::new(e.into())), Vec::new()),
                        };
                        rt.complete_value(id, None, value, nested);
                    });
                    return;
                }
                Err(e) => (Value::Failed(Box::new(e)), Vec::new()),
            },
            Err(e) => (Value::Failed(Box::new(e)), Vec::new()),
        };
        self.complete_value(id, cell, value, nested);
    }

    /// Sets an object's value (its bytes already placed); a stored value
    /// nobody waits for any more is deleted.
    fn complete_value(
        &self,
        id: ray_proto::ObjectId,
        cell: Option<&ObjectCell>,
        value: Value,
        nested: Vec<Arc<crate::ownership::RefHandle>>,
    ) {
        let stored = matches!(value, Value::Stored);
        let taken = match cell {
            Some(cell) => cell.complete(value, nested),
            None => self.objects.complete(id, value, nested),
        };
        // Nobody took it: the bytes go, unless the object came back meanwhile
        // (fetched again) and its value already refers to them.
        if !taken && stored && !self.objects.has_value(id) {
            self.store.delete(id);
        }
    }
}
