//! What is running on this thread: the task context set by the pool.
//!
//! A pool thread running a task or actor call knows its runtime, its task id
//! and the resources it holds, so that nested submissions find the runtime
//! and a `get` that has to wait can hand the task's CPU back.

use std::cell::RefCell;
use std::sync::Arc;

use ray_proto::{ActorId, TaskId};
use ray_sched::ResourceSet;

use crate::placement::Pool;
use crate::runtime::Runtime;

/// The runtime a task context belongs to, without a count of its own.
///
/// A context lives only inside the [`with_task`] call that set it, and that
/// call borrows an `Arc<Runtime>` throughout, so the runtime outlives it.
/// Not counting spares every task an increment and a decrement of the
/// runtime's reference count, a cache line the submitting thread also
/// writes for every object it registers (embedded W1).
pub(crate) struct RuntimeRef(*const Runtime);

impl RuntimeRef {
    /// A counted handle to the runtime.
    pub(crate) fn arc(&self) -> Arc<Runtime> {
        // SAFETY: the pointer is `Arc::as_ptr` of an `Arc<Runtime>` that
        // `with_task` borrows for as long as this context is installed
        // (see the type's doc), so the allocation is live with a strong
        // count of at least one; adding one and taking it as an `Arc` is
        // what `Arc::clone` does.
        unsafe {
            Arc::increment_strong_count(self.0);
            Arc::from_raw(self.0)
        }
    }
}

/// The task (or actor call) running on this thread.
pub(crate) struct TaskContext {
    rt: RuntimeRef,
    pub(crate) task: TaskId,
    /// The actor whose constructor or method this is, if any.
    actor: Option<ActorId>,
    /// The id insight records for it: `task`, except in a worker running
    /// work pushed by another process, where it is the owner's id.
    trace: TaskId,
    /// Resources the task holds while running, and where from (released
    /// while blocked).
    pub(crate) resources: Option<(Pool, ResourceSet)>,
    /// Number of blocking waits in progress (0 or 1: only the outermost counts).
    blocked: u32,
    /// Whether this task's records were handed to insight before its first
    /// child was submitted, and inside which application span (see
    /// [`before_child_submit`]): 0 not yet, [`ANNOUNCED`] outside any
    /// span, else the span's id folded to 32 bits ([`span_mark`]). (Beside
    /// `blocked` in 8 bytes: a bigger context is moved with `memcpy` on
    /// every task, measured on embedded W3.)
    announced: u32,
}

/// [`TaskContext::announced`]: handed over, outside any span.
const ANNOUNCED: u32 = 1;

/// A span as [`TaskContext::announced`] keeps it: its sequence on its
/// thread (the low bits) mixed with its thread's tag (above bit 40), in 32
/// bits, never 0 or [`ANNOUNCED`]. Two spans that fold alike cost at most
/// one hand-over too few, which the views wait out.
fn span_mark(span: u64) -> u32 {
    ((span ^ (span >> 40).rotate_left(16)) as u32).max(2)
}

thread_local! {
    static CURRENT: RefCell<Option<TaskContext>> = const { RefCell::new(None) };
}

/// Runs `f` with `ctx` as this thread's task context.
pub(crate) fn with_task<R>(
    rt: &Arc<Runtime>,
    task: TaskId,
    trace: TaskId,
    actor: Option<ActorId>,
    resources: Option<(Pool, ResourceSet)>,
    f: impl FnOnce() -> R,
) -> R {
    let ctx = TaskContext {
        rt: RuntimeRef(Arc::as_ptr(rt)),
        task,
        actor,
        trace,
        resources,
        blocked: 0,
        announced: 0,
    };
    let prev = CURRENT.with(|c| c.borrow_mut().replace(ctx));
    struct Restore(Option<TaskContext>, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
            crate::trace::restore_entered(self.1);
        }
    }
    let _restore = Restore(prev, crate::trace::entered_mark());
    f()
}

/// The runtime and task of the current thread, if it runs a task.
pub(crate) fn current() -> Option<(Arc<Runtime>, TaskId)> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| (ctx.rt.arc(), ctx.task)))
}

/// The task and actor running on this thread, if it runs a task.
pub(crate) fn current_ids() -> Option<(Option<TaskId>, Option<ActorId>)> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| (Some(ctx.task), ctx.actor)))
}

/// Whether this thread runs a task or actor call.
pub(crate) fn in_task() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// The id insight records for the task running on this thread, if any:
/// what child tasks name as their parent.
pub(crate) fn current_trace() -> Option<TaskId> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| ctx.trace))
}

/// Called before a task submits a child task, actor call or actor (inside
/// the application's span `span`, 0 for none; see
/// [`crate::trace::user_span`]): the first time, and the first time inside
/// each such span, while the process records, the task's own records (its
/// run span and that span's opening above all) go to the collector, so
/// they reach the views before any record of its children, which other
/// threads or processes emit.
pub(crate) fn before_child_submit(span: u64) {
    if !crate::hooks::recording() {
        return;
    }
    let first = CURRENT.with(|c| {
        c.borrow_mut().as_mut().is_some_and(|ctx| {
            let now = if span == 0 {
                ANNOUNCED
            } else {
                span_mark(span)
            };
            // Not yet, or a span not handed over yet (a submit outside
            // any span after one inside keeps the last span's mark).
            let due = ctx.announced == 0 || (span != 0 && ctx.announced != now);
            if due {
                ctx.announced = now;
            }
            due
        })
    });
    if first {
        crate::hooks::flush();
    }
}

/// Marks the current task as blocked until the guard drops: its CPU goes
/// back to the node and its pool slot to other work.
pub(crate) struct BlockGuard {
    rt: Arc<Runtime>,
    task: TaskId,
    resources: Option<(Pool, ResourceSet)>,
    /// The `wait` span (insight's distributed stack): open while blocked.
    _span: tracing::Span,
}

/// Starts a blocking wait on `objects` if this thread runs a task; `None`
/// otherwise.
///
/// Records a `wait` span (task, objects, and the task producing each:
/// a task's return object shares its id) for insight's distributed stack.
pub(crate) fn begin_blocking(objects: &[ray_proto::ObjectId]) -> Option<BlockGuard> {
    let (rt, task, trace, resources) = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let ctx = c.as_mut()?;
        if ctx.blocked > 0 {
            return None;
        }
        ctx.blocked = 1;
        Some((ctx.rt.arc(), ctx.task, ctx.trace, ctx.resources.clone()))
    })?;
    if let Some((pool, res)) = &resources {
        rt.release_to(pool, res);
    }
    if let Some(remote) = rt.remote.get() {
        remote.task_blocked(task, true);
    }
    rt.pool.begin_blocking();
    let span = if tracing::enabled!(target: "ray::wait", tracing::Level::TRACE) {
        let list = |f: &dyn Fn(&ray_proto::ObjectId) -> String| {
            objects.iter().map(f).collect::<Vec<_>>().join(",")
        };
        tracing::trace_span!(
            target: "ray::wait",
            "wait",
            task_id = trace.as_u128(),
            objects = %list(&|o| o.to_string()),
            producers = %list(&|o| TaskId::new(o.owner, o.seq).to_string()),
        )
    } else {
        tracing::Span::none()
    };
    // The task's own records (its run span, its children's submits) go to
    // the collector now, before its children's: views built from several
    // processes then see a parent before the children it waits for.
    crate::hooks::flush();
    Some(BlockGuard {
        rt,
        task,
        resources,
        _span: span,
    })
}

impl Drop for BlockGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            if let Some(ctx) = c.borrow_mut().as_mut() {
                ctx.blocked = 0;
            }
        });
        self.rt.pool.end_blocking();
        if let Some((pool, res)) = &self.resources {
            self.rt.acquire_forced_in(pool, res);
        }
        if let Some(remote) = self.rt.remote.get() {
            remote.task_blocked(self.task, false);
        }
    }
}
