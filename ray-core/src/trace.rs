//! The runtime's own insight records: task and actor runs, submits, object
//! puts and gets.
//!
//! When the process records for insight, these go straight into the insight
//! layer's per-thread buffers (`ray_insight::direct`), skipping `tracing`'s
//! dispatch; otherwise they are `tracing` spans and events as before, for
//! any subscriber that listens. Both give the views the same names and
//! fields (`task.run`, `task_id`, …); only the cost differs. Deciding costs
//! one relaxed load.

use ray_proto::{NodeId, ObjectId, TaskId, WorkerId};

#[cfg(feature = "insight")]
use ray_insight::{direct, FieldStr, FieldValue, Fields};

/// Whether the runtime records directly (insight is on in this process).
#[cfg(feature = "insight")]
#[inline]
fn direct() -> bool {
    direct::enabled()
}

/// A run of a task, an actor call or a constructor, open until dropped.
#[must_use = "the run's span closes when this drops"]
pub(crate) enum RunSpan {
    #[cfg(feature = "insight")]
    Direct(#[allow(dead_code)] direct::DirectSpan),
    /// An actor's run, recorded directly with the CPU time its thread spent
    /// on it: the close record carries `cpu_nanos`.
    #[cfg(feature = "insight")]
    Timed {
        span: Option<direct::DirectSpan>,
        cpu_start: u64,
    },
    Tracing(#[allow(dead_code)] tracing::span::EnteredSpan),
}

#[cfg(feature = "insight")]
impl Drop for RunSpan {
    fn drop(&mut self) {
        if let RunSpan::Timed { span, cpu_start } = self {
            let end = cpu::read();
            cpu::mark(end);
            if let Some(span) = span.take() {
                let used = end.saturating_sub(*cpu_start);
                span.close_with(|f| f.push("cpu_nanos", FieldValue::U64(used)));
            }
        }
    }
}

/// The CPU time of actor runs: the calling thread's CPU clock read when a
/// run ends, and when it starts unless the previous run of the same drain
/// loop ended just before ([`DrainScope`]); one reading per call in a busy
/// mailbox instead of two (a reading is a system call, ~0.3 µs here).
#[cfg(feature = "insight")]
mod cpu {
    use std::cell::Cell;

    thread_local! {
        /// Inside a drain loop: the reading at the end of its last run (the
        /// start of the next; what runs between them, taking the next call
        /// from the mailbox, is that call's). `None` outside a loop.
        static MARK: Cell<Option<u64>> = const { Cell::new(None) };
        static IN_DRAIN: Cell<bool> = const { Cell::new(false) };
    }

    /// This thread's CPU time in nanoseconds (0 if the clock cannot be read).
    pub(super) fn read() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's
        // duration; clock_gettime writes only into it.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return 0;
        }
        u64::try_from(ts.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
    }

    /// Where a run starting now starts: the loop's mark, else a reading.
    pub(super) fn start() -> u64 {
        MARK.with(Cell::take).unwrap_or_else(read)
    }

    /// A run ended at `end`: the next run of the loop starts there.
    pub(super) fn mark(end: u64) {
        if IN_DRAIN.with(Cell::get) {
            MARK.with(|m| m.set(Some(end)));
        }
    }

    pub(super) fn enter_drain() -> bool {
        MARK.with(|m| m.set(None));
        !IN_DRAIN.with(|d| d.replace(true))
    }

    pub(super) fn leave_drain() {
        MARK.with(|m| m.set(None));
        IN_DRAIN.with(|d| d.set(false));
    }
}

/// A loop that runs an actor's queued calls back to back on this thread:
/// while it lives, each recorded call's CPU time starts where the previous
/// one ended (see the `cpu` module). Costs nothing when nothing records.
pub(crate) struct DrainScope {
    #[cfg(feature = "insight")]
    outer: bool,
}

impl DrainScope {
    /// Enters a drain loop (a nested one leaves the outer's state alone).
    pub(crate) fn enter() -> Self {
        #[cfg(feature = "insight")]
        {
            DrainScope {
                outer: direct() && cpu::enter_drain(),
            }
        }
        #[cfg(not(feature = "insight"))]
        DrainScope {}
    }
}

#[cfg(feature = "insight")]
impl Drop for DrainScope {
    fn drop(&mut self) {
        if self.outer {
            cpu::leave_drain();
        }
    }
}

#[cfg(feature = "insight")]
fn id(fields: &mut Fields, key: &'static str, value: u128) {
    fields.push(
        key,
        FieldValue::U128 {
            hi: (value >> 64) as u64,
            lo: value as u64,
        },
    );
}

#[cfg(feature = "insight")]
fn name(fields: &mut Fields, key: &'static str, value: &'static str) {
    fields.push(key, FieldValue::Str(FieldStr::from_static(value)));
}

#[cfg(feature = "insight")]
fn place(fields: &mut Fields, node: NodeId, worker: WorkerId) {
    fields.push("node_id", FieldValue::U64(node.0));
    fields.push("worker_id", FieldValue::U64(worker.0));
}

/// What a run span says: the task, what runs, where, and its caller.
pub(crate) struct Run {
    pub(crate) task: TaskId,
    pub(crate) parent: Option<TaskId>,
    pub(crate) node: NodeId,
    pub(crate) worker: WorkerId,
}

/// Opens `task.run` for a task's run (`attempt` > 0 for retries).
pub(crate) fn task_run(run: Run, function: &'static str, attempt: u32) -> RunSpan {
    #[cfg(feature = "insight")]
    if direct() {
        return RunSpan::Direct(direct::open_span("task.run", "ray::task", |f| {
            id(f, "task_id", run.task.as_u128());
            name(f, "function", function);
            if attempt > 0 {
                f.push("attempt", FieldValue::U64(u64::from(attempt)));
            }
            if let Some(parent) = run.parent {
                id(f, "parent_task", parent.as_u128());
            }
            place(f, run.node, run.worker);
        }));
    }
    RunSpan::Tracing(
        tracing::trace_span!(
            target: "ray::task",
            "task.run",
            task_id = run.task.as_u128(),
            function,
            // Recorded only for retries: one field less on every first run.
            attempt = (attempt > 0).then_some(attempt),
            parent_task = run.parent.map(TaskId::as_u128),
            node_id = run.node.0,
            worker_id = run.worker.0,
        )
        .entered(),
    )
}

/// Opens `actor.call` (`method` given) or `actor.create` (`None`) for a run
/// on `actor` of `class`.
pub(crate) fn actor_run(
    run: Run,
    actor: u128,
    class: &'static str,
    method: Option<&'static str>,
) -> RunSpan {
    #[cfg(feature = "insight")]
    if direct() {
        let span_name = if method.is_some() {
            "actor.call"
        } else {
            "actor.create"
        };
        let cpu_start = cpu::start();
        let span = direct::open_span(span_name, "ray::actor", |f| {
            id(f, "task_id", run.task.as_u128());
            id(f, "actor_id", actor);
            name(f, "class", class);
            if let Some(method) = method {
                name(f, "method", method);
            }
            if let Some(parent) = run.parent {
                id(f, "parent_task", parent.as_u128());
            }
            place(f, run.node, run.worker);
        });
        return RunSpan::Timed {
            span: Some(span),
            cpu_start,
        };
    }
    let parent_task = run.parent.map(TaskId::as_u128);
    let span = match method {
        Some(method) => tracing::trace_span!(
            target: "ray::actor",
            "actor.call",
            task_id = run.task.as_u128(),
            actor_id = actor,
            class,
            method,
            parent_task,
            node_id = run.node.0,
            worker_id = run.worker.0,
        ),
        None => tracing::trace_span!(
            target: "ray::actor",
            "actor.create",
            task_id = run.task.as_u128(),
            actor_id = actor,
            class,
            parent_task,
            node_id = run.node.0,
            worker_id = run.worker.0,
        ),
    };
    RunSpan::Tracing(span.entered())
}

/// `task.submit`: a task of `function`, or a call of `method` on `actor`.
pub(crate) fn submit(
    task: TaskId,
    parent: Option<TaskId>,
    function: &'static str,
    actor: Option<u128>,
) {
    #[cfg(feature = "insight")]
    if direct() {
        direct::event("task.submit", "ray::task", |f| {
            id(f, "task_id", task.as_u128());
            match actor {
                Some(actor) => {
                    name(f, "method", function);
                    id(f, "actor_id", actor);
                }
                None => name(f, "function", function),
            }
            if let Some(parent) = parent {
                id(f, "parent_task", parent.as_u128());
            }
        });
        return;
    }
    let parent_task = parent.map(TaskId::as_u128);
    match actor {
        Some(actor_id) => tracing::trace!(
            name: "task.submit",
            target: "ray::task",
            task_id = task.as_u128(),
            method = function,
            actor_id,
            parent_task
        ),
        None => tracing::trace!(
            name: "task.submit",
            target: "ray::task",
            task_id = task.as_u128(),
            function,
            parent_task
        ),
    }
}

/// `object.put` (`get` false) or `object.get`: `bytes` of `object` moved on
/// `node`, by the current task (the driver outside one); `arg`: read as a
/// task's argument. Nothing is looked up when nothing records.
pub(crate) fn object(get: bool, object: ObjectId, bytes: usize, node: NodeId, arg: bool) {
    #[cfg(feature = "insight")]
    if direct() {
        let event = if get { "object.get" } else { "object.put" };
        let task = crate::context::current_trace();
        direct::event(event, "ray::object", |f| {
            id(f, "object_id", object.as_u128());
            f.push("bytes", FieldValue::U64(bytes as u64));
            if let Some(task) = task {
                id(f, "task_id", task.as_u128());
            }
            f.push("node_id", FieldValue::U64(node.0));
            if get {
                f.push("arg", FieldValue::Bool(arg));
            }
        });
        return;
    }
    // The macros evaluate their fields only when a subscriber listens.
    if get {
        tracing::trace!(
            name: "object.get",
            target: "ray::object",
            object_id = object.as_u128(),
            bytes,
            task_id = crate::context::current_trace().map(TaskId::as_u128),
            node_id = node.0,
            arg
        );
    } else {
        tracing::trace!(
            name: "object.put",
            target: "ray::object",
            object_id = object.as_u128(),
            bytes,
            task_id = crate::context::current_trace().map(TaskId::as_u128),
            node_id = node.0
        );
    }
}
