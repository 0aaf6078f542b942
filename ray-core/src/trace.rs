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
use ray_insight::{direct, FieldValue, Fields};

/// Whether the runtime records directly (insight is on in this process).
#[cfg(feature = "insight")]
#[inline]
fn direct() -> bool {
    direct::enabled()
}

/// Whether anything could take the runtime's records: direct recording,
/// or a `tracing` subscriber that lets `TRACE` through. One or two relaxed
/// loads; when false the callers build nothing (the `tracing` macros would
/// find that out too, a few dozen instructions later, on every task).
#[inline]
fn listened() -> bool {
    #[cfg(feature = "insight")]
    if direct() {
        return true;
    }
    tracing::level_enabled!(tracing::Level::TRACE)
}

/// The application's innermost recorded span entered on this thread (a
/// `tracing` span such as `reward_fn` inside a task), or 0: tasks and calls
/// submitted inside it carry it (`parent_span`), so the views put them
/// under its frame. 0 at once when nothing listens.
#[inline]
pub(crate) fn user_span() -> u64 {
    #[cfg(feature = "insight")]
    if listened() {
        return direct::current_user_span();
    }
    0
}

/// How many application spans are entered on this thread when a task
/// starts (`usize::MAX` when nothing listens); see [`restore_entered`].
#[inline]
pub(crate) fn entered_mark() -> usize {
    #[cfg(feature = "insight")]
    if listened() {
        return direct::entered_depth();
    }
    usize::MAX
}

/// At a task's end: forgets application spans it left entered on this
/// thread (a guard that exited on another thread).
#[inline]
pub(crate) fn restore_entered(mark: usize) {
    #[cfg(feature = "insight")]
    if mark != usize::MAX {
        direct::truncate_entered(mark);
    }
    #[cfg(not(feature = "insight"))]
    let _ = mark;
}

/// A run of a task, an actor call or a constructor, open until dropped.
#[must_use = "the run's span closes when this drops"]
pub(crate) enum RunSpan {
    /// Recorded directly; its close carries `error` if the run failed,
    /// and for an actor's run (`actor_run`) the CPU time its thread spent on
    /// it, `cpu_nanos` (see [`cpu`]), left out when the close is folded
    /// into the opening record and the run is counted at its wall time
    /// (the views then take the record's own span).
    #[cfg(feature = "insight")]
    Direct {
        span: Option<direct::DirectSpan>,
        actor_run: bool,
        error: Option<String>,
    },
    Tracing(tracing::span::EnteredSpan),
    /// Nothing listens: nothing to close.
    Off,
}

impl RunSpan {
    /// The run failed with `error` (an error or a panic of the call): its
    /// close says so, for the views to count it failed.
    pub(crate) fn failed(&mut self, error: &dyn std::fmt::Display) {
        match self {
            #[cfg(feature = "insight")]
            RunSpan::Direct {
                span: Some(span),
                error: slot,
                ..
            } if span.id() != 0 => *slot = Some(bounded(error.to_string())),
            #[cfg(feature = "insight")]
            RunSpan::Direct { .. } => {}
            RunSpan::Tracing(span) => {
                span.record("error", tracing::field::display(error));
            }
            RunSpan::Off => {}
        }
    }
}

/// The most of an error's text a record keeps, in bytes.
#[cfg(feature = "insight")]
const MAX_ERROR_BYTES: usize = 256;

/// `text` cut to at most [`MAX_ERROR_BYTES`] (on a character boundary).
#[cfg(feature = "insight")]
fn bounded(mut text: String) -> String {
    if text.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(feature = "insight")]
impl Drop for RunSpan {
    fn drop(&mut self) {
        if let RunSpan::Direct {
            span,
            actor_run,
            error,
        } = self
        {
            let actor_run = *actor_run;
            if let Some(span) = span.take() {
                // A run recorded as one record and counted at its wall
                // time carries no `cpu_nanos`: the views take that from
                // the record. Its wall time is the layer clock's.
                span.close_run_timed(
                    |wall| actor_run.then(|| cpu::run_ended(std::time::Duration::from_nanos(wall))),
                    error.take(),
                );
            }
        }
    }
}

/// The CPU time of actor runs, at next to no cost per call.
///
/// Reading a thread's CPU clock is a system call (about 0.3 µs here, a
/// third of an actor call's whole cost), so a run does not always read it
/// at its start and end. Each thread keeps a *mark*: its CPU clock at its
/// last reading. A run that finds no mark reads the clock at its start. A
/// run of [`cpu::LONG_RUN`] or more reads it at its end and takes what the
/// thread used since the mark, less what the shorter runs since then were
/// counted at; a shorter run is counted at its wall time (an upper bound of
/// what it used), with no reading. The mark holds only while the thread
/// goes from run to run (a busy mailbox, a busy pool: one reading per
/// batch); a pool thread that runs out of work ([`thread_idles`]) or runs a
/// task clears it, so what it spends between jobs (spinning, handing
/// records over) is no call's.
#[cfg(feature = "insight")]
mod cpu {
    use std::cell::Cell;
    use std::time::Duration;

    /// Runs at least this long read the CPU clock (one reading costs under
    /// 1 % of such a run); shorter ones are counted at their wall time.
    pub(super) const LONG_RUN: Duration = Duration::from_micros(50);

    thread_local! {
        /// The thread's CPU clock at its last reading, and the wall time
        /// of the short runs counted since; `None`: no usable reading.
        static MARK: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    /// This thread's CPU time in nanoseconds (0 if the clock cannot be read).
    fn read() -> u64 {
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

    /// An actor run starts: it needs a mark to measure from.
    pub(super) fn run_starts() {
        MARK.with(|m| {
            if m.get().is_none() {
                m.set(Some((read(), 0)));
            }
        });
    }

    /// An actor run that took `wall` ended: the CPU time it is counted at,
    /// and whether that is its wall time (no clock reading).
    pub(super) fn run_ended(wall: Duration) -> (u64, bool) {
        let wall_nanos = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
        MARK.with(|m| match m.get() {
            Some((mark, short)) if wall >= LONG_RUN => {
                let now = read();
                m.set(Some((now, 0)));
                let used = now
                    .saturating_sub(mark)
                    .saturating_sub(short)
                    .min(wall_nanos);
                (used, false)
            }
            Some((mark, short)) => {
                m.set(Some((mark, short.saturating_add(wall_nanos))));
                (wall_nanos, true)
            }
            // Cleared meanwhile (a task ran inside the call): its wall time.
            None => (wall_nanos, true),
        })
    }

    /// Something not measured runs on this thread: the next run starts
    /// from a fresh reading.
    pub(super) fn forget() {
        MARK.with(|m| m.set(None));
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

/// The calling pool thread ran out of work: the next actor run on it reads
/// the CPU clock afresh (see the `cpu` module).
#[inline]
pub(crate) fn thread_idles() {
    #[cfg(feature = "insight")]
    cpu::forget();
}

/// What a run span says: the task, what runs, where, and its caller.
pub(crate) struct Run {
    pub(crate) task: TaskId,
    pub(crate) parent: Option<TaskId>,
    /// The span of the caller's it was submitted in ([`user_span`]), or 0.
    pub(crate) parent_span: u64,
    pub(crate) node: NodeId,
    pub(crate) worker: WorkerId,
}

#[cfg(feature = "insight")]
impl Run {
    /// The run's compact record, for a run of `kind`.
    fn info(&self, kind: direct::RunKind, attempt: u32) -> direct::RunInfo {
        direct::RunInfo {
            kind,
            task: self.task.as_u128(),
            attempt,
            parent_task: self.parent.map(TaskId::as_u128),
            parent_span: self.parent_span,
            node: self.node.0,
            worker: self.worker.0,
        }
    }
}

/// Opens `task.run` for a task's run (`attempt` > 0 for retries).
#[inline]
pub(crate) fn task_run(run: Run, function: &'static str, attempt: u32) -> RunSpan {
    if !listened() {
        return RunSpan::Off;
    }
    task_run_listened(run, function, attempt)
}

fn task_run_listened(run: Run, function: &'static str, attempt: u32) -> RunSpan {
    #[cfg(feature = "insight")]
    if direct() {
        cpu::forget();
        let span = direct::open_run(run.info(direct::RunKind::Task { function }, attempt));
        return RunSpan::Direct {
            span: Some(span),
            actor_run: false,
            error: None,
        };
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
            parent_span = (run.parent_span != 0).then_some(run.parent_span),
            node_id = run.node.0,
            worker_id = run.worker.0,
            error = tracing::field::Empty,
        )
        .entered(),
    )
}

/// Opens `actor.call` (`call`: the method and which send of the call this
/// is, recorded when above 0) or `actor.create` (`None`) for a run on
/// `actor` of `class`.
#[inline]
pub(crate) fn actor_run(
    run: Run,
    actor: u128,
    class: &'static str,
    call: Option<(&'static str, u32)>,
) -> RunSpan {
    if !listened() {
        return RunSpan::Off;
    }
    actor_run_listened(run, actor, class, call)
}

fn actor_run_listened(
    run: Run,
    actor: u128,
    class: &'static str,
    call: Option<(&'static str, u32)>,
) -> RunSpan {
    #[cfg(feature = "insight")]
    if direct() {
        cpu::run_starts();
        let (kind, attempt) = match call {
            Some((method, attempt)) => (
                direct::RunKind::ActorCall {
                    actor,
                    class,
                    method,
                },
                attempt,
            ),
            None => (direct::RunKind::ActorCreate { actor, class }, 0),
        };
        let span = direct::open_run(run.info(kind, attempt));
        return RunSpan::Direct {
            span: Some(span),
            actor_run: true,
            error: None,
        };
    }
    let parent_task = run.parent.map(TaskId::as_u128);
    let parent_span = (run.parent_span != 0).then_some(run.parent_span);
    let span = match call {
        Some((method, attempt)) => tracing::trace_span!(
            target: "ray::actor",
            "actor.call",
            task_id = run.task.as_u128(),
            actor_id = actor,
            class,
            method,
            attempt = (attempt > 0).then_some(attempt),
            parent_task,
            parent_span,
            node_id = run.node.0,
            worker_id = run.worker.0,
            error = tracing::field::Empty,
        ),
        None => tracing::trace_span!(
            target: "ray::actor",
            "actor.create",
            task_id = run.task.as_u128(),
            actor_id = actor,
            class,
            parent_task,
            parent_span,
            node_id = run.node.0,
            worker_id = run.worker.0,
            error = tracing::field::Empty,
        ),
    };
    RunSpan::Tracing(span.entered())
}

/// `task.submit`: a task of `function`, or a call of `method` on `actor`.
#[inline]
pub(crate) fn submit(
    task: TaskId,
    parent: Option<TaskId>,
    parent_span: u64,
    function: &'static str,
    actor: Option<u128>,
) {
    if listened() {
        submit_listened(task, parent, parent_span, function, actor);
    }
}

fn submit_listened(
    task: TaskId,
    parent: Option<TaskId>,
    parent_span: u64,
    function: &'static str,
    actor: Option<u128>,
) {
    #[cfg(feature = "insight")]
    if direct() {
        direct::submit(&direct::SubmitInfo {
            task: task.as_u128(),
            function,
            actor,
            parent_task: parent.map(TaskId::as_u128),
            parent_span,
        });
        return;
    }
    let parent_task = parent.map(TaskId::as_u128);
    let parent_span = (parent_span != 0).then_some(parent_span);
    match actor {
        Some(actor_id) => tracing::trace!(
            name: "task.submit",
            target: "ray::task",
            task_id = task.as_u128(),
            method = function,
            actor_id,
            parent_task,
            parent_span
        ),
        None => tracing::trace!(
            name: "task.submit",
            target: "ray::task",
            task_id = task.as_u128(),
            function,
            parent_task,
            parent_span
        ),
    }
}

/// `task.lost`: the owner of `task` lost its run `attempt` (its worker or
/// node died; a retry follows), or, with no attempt, gave it up for good
/// with `error`.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) fn lost(task: TaskId, attempt: Option<u32>, error: Option<&dyn std::fmt::Display>) {
    #[cfg(feature = "insight")]
    if direct() {
        let error = error.map(|e| bounded(e.to_string()));
        direct::event("task.lost", "ray::task", |f| {
            id(f, "task_id", task.as_u128());
            if let Some(attempt) = attempt {
                f.push("attempt", FieldValue::U64(u64::from(attempt)));
            }
            if let Some(error) = error {
                f.push("error", FieldValue::Str(error.into()));
            }
        });
        return;
    }
    tracing::trace!(
        name: "task.lost",
        target: "ray::task",
        task_id = task.as_u128(),
        attempt,
        error = error.map(tracing::field::display),
    );
}

/// `object.put` (`get` false) or `object.get`: `bytes` of `object` moved on
/// `node`, by the current task (the driver outside one); `arg`: read as a
/// task's argument. Nothing is looked up when nothing records.
#[inline]
pub(crate) fn object(get: bool, object: ObjectId, bytes: usize, node: NodeId, arg: bool) {
    if listened() {
        object_listened(get, object, bytes, node, arg);
    }
}

fn object_listened(get: bool, object: ObjectId, bytes: usize, node: NodeId, arg: bool) {
    #[cfg(feature = "insight")]
    if direct() {
        direct::object(&direct::ObjectInfo {
            object: object.as_u128(),
            bytes: bytes as u64,
            task: crate::context::current_trace().map(TaskId::as_u128),
            node: node.0,
            get: get.then_some(arg),
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
