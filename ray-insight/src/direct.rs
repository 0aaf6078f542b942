//! The runtime's own records, written straight into an [`InsightLayer`](crate::InsightLayer)'s
//! per-thread buffers without going through `tracing`'s dispatch.
//!
//! Recording a runtime span through `tracing` costs a registry slot, an
//! extension map, a field visitor and a walk up the span tree, on every task
//! and actor call. The runtime's hot records ([`submit`], [`object`],
//! [`open_run`]) are written here in compact fixed shapes, a fifth to two
//! fifths of a [`Record`]'s bytes, which the collector
//! expands into the same records: the views, the log and shipping see no
//! difference. [`event`] and [`open_span`] write whole records, with any
//! fields. When no layer is the target
//! ([`InsightLayer::record_runtime_directly`](crate::InsightLayer::record_runtime_directly)),
//! [`enabled`] is one relaxed load that says false, and the runtime emits its
//! `tracing` spans as before (for any subscriber that listens).
//!
//! Parents: a direct span's parent is the innermost direct span open on the
//! same thread, and a `tracing` span or event the layer records with no
//! recorded `tracing` ancestor hangs under it too, so a user's span inside a
//! task is a child of the task's run.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::layer::{self, append, append_merging, append_packed, Kind, SpanOp};
pub use crate::packed::{ObjectInfo, RunInfo, RunKind, SubmitInfo};
use crate::queue::Shared;
use crate::record::{FieldValue, Fields, Record, RecordKind};

/// The layer the runtime records into directly, once one asked to be.
static TARGET: OnceLock<Arc<Shared>> = OnceLock::new();

/// Whether [`TARGET`] is set and its layer still alive.
static ON: AtomicBool = AtomicBool::new(false);

/// Makes `shared`'s layer the target; false if another layer is.
pub(crate) fn install(shared: Arc<Shared>) -> bool {
    let target = TARGET.get_or_init(|| Arc::clone(&shared));
    let ours = Arc::ptr_eq(target, &shared) && !shared.layer_gone();
    if ours {
        ON.store(true, Ordering::Release);
    }
    ours
}

/// Stops direct recording if `shared`'s layer was the target (it is being
/// dropped).
pub(crate) fn uninstall(shared: &Arc<Shared>) {
    if TARGET.get().is_some_and(|t| Arc::ptr_eq(t, shared)) {
        ON.store(false, Ordering::Release);
    }
}

/// Whether the runtime should record directly: one relaxed load.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

fn target() -> Option<&'static Arc<Shared>> {
    if enabled() {
        TARGET.get()
    } else {
        None
    }
}

/// The innermost span of the application's that the layer recorded and
/// that is entered on this thread (such as `reward_fn` inside a task), or
/// 0. The runtime sends it with the tasks and calls submitted there
/// (`parent_span`), so the views put them under that span's frame. Works
/// whether the runtime records directly or through `tracing`.
pub fn current_user_span() -> u64 {
    layer::current_user_span()
}

/// How many application spans are entered on this thread: a mark for
/// [`truncate_entered`].
pub fn entered_depth() -> usize {
    layer::entered_depth()
}

/// Forgets the application spans entered on this thread past the first
/// `depth` ([`entered_depth`] taken earlier): the runtime calls it when a
/// task ends, so a span guard that exited on another thread (held across
/// an `.await`) is not taken for the parent of later work here.
pub fn truncate_entered(depth: usize) {
    layer::truncate_entered(depth);
}

/// Records an event named `name` (under `target`), its fields written by
/// `fill`, inside the innermost direct span open on this thread. Does
/// nothing when direct recording is off.
pub fn event(name: &'static str, target_name: &'static str, fill: impl FnOnce(&mut Fields)) {
    if let Some(shared) = target() {
        let parent = layer::current_direct_span();
        append(shared, Kind::Event, parent, (name, target_name), fill);
    }
}

/// Records `task.submit` in its compact form (see [`SubmitInfo`]), inside
/// the innermost direct span open on this thread. Does nothing when
/// direct recording is off.
pub fn submit(info: &SubmitInfo) {
    if let Some(shared) = target() {
        append_packed(shared, SpanOp::None, |batch, stamp| {
            batch.push_submit(stamp.thread, stamp.at, stamp.parent, info);
        });
    }
}

/// Records `object.put` or `object.get` in its compact form (see
/// [`ObjectInfo`]), inside the innermost direct span open on this thread.
/// Does nothing when direct recording is off.
pub fn object(info: &ObjectInfo) {
    if let Some(shared) = target() {
        append_packed(shared, SpanOp::None, |batch, stamp| {
            batch.push_object(stamp.thread, stamp.at, stamp.parent, info);
        });
    }
}

/// Opens a run (`task.run`, `actor.call` or `actor.create`, from
/// `info.kind`) in its compact form, as a child of the innermost direct
/// span open on this thread; close it with [`DirectSpan::close_run`] (or
/// by dropping it). Inert when direct recording is off.
pub fn open_run(info: RunInfo) -> DirectSpan {
    let Some(shared) = target() else {
        return DirectSpan::NONE;
    };
    let Some((id, parent, opened)) = append_packed(shared, SpanOp::Open, |batch, stamp| {
        batch.push_run(stamp.thread, stamp.at, stamp.span, stamp.parent, info);
        (stamp.span, stamp.parent, stamp.at)
    }) else {
        return DirectSpan::NONE;
    };
    let (name, target) = info.names();
    DirectSpan {
        id,
        parent,
        name,
        target,
        packed: true,
        opened,
        _thread: PhantomData,
    }
}

/// Opens a span named `name` (under `target`), its fields written by `fill`,
/// as a child of the innermost direct span open on this thread; it closes
/// when the returned guard drops, on this thread. Inert when direct
/// recording is off.
pub fn open_span(
    name: &'static str,
    target_name: &'static str,
    fill: impl FnOnce(&mut Fields),
) -> DirectSpan {
    let Some(shared) = target() else {
        return DirectSpan::NONE;
    };
    let parent = layer::current_direct_span();
    let Some(id) = append(shared, Kind::SpanNew, parent, (name, target_name), fill) else {
        return DirectSpan::NONE;
    };
    layer::track_direct_span(id, true);
    DirectSpan {
        id,
        parent,
        name,
        target: target_name,
        packed: false,
        opened: 0,
        _thread: PhantomData,
    }
}

/// An open direct span: its close is recorded when this drops.
///
/// Not `Send`: it must close on the thread that opened it, where it is on
/// the stack of open spans.
#[must_use = "the span closes when this guard drops"]
#[derive(Debug)]
pub struct DirectSpan {
    id: u64,
    parent: u64,
    name: &'static str,
    target: &'static str,
    /// Opened by [`open_run`]: its opening is a compact record.
    packed: bool,
    /// When it opened, on the layer's clock (runs from [`open_run`]).
    opened: u64,
    _thread: PhantomData<*const ()>,
}

impl DirectSpan {
    const NONE: DirectSpan = DirectSpan {
        id: 0,
        parent: 0,
        name: "",
        target: "",
        packed: false,
        opened: 0,
        _thread: PhantomData,
    };

    /// The span's id as recorded (0 when nothing was recorded).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Closes the span now, its close carrying the fields `fill` writes
    /// (what is known only at the end, such as the CPU time a run took).
    /// `fill` is told whether the close was folded into the span's opening
    /// record (nothing was recorded on this thread since it opened: one
    /// record with [`CLOSED_AT`](crate::CLOSED_AT) stands for both) or is
    /// a close record of its own. Dropping the guard closes it with no
    /// fields. A run from [`open_run`] has no fields to add to: `fill` is
    /// not called, and the close is [`DirectSpan::close_run`]'s with
    /// nothing to say.
    pub fn close_with(mut self, fill: impl FnOnce(&mut Fields, bool)) {
        self.close(fill);
    }

    /// Closes a run opened by [`open_run`]. `cpu`: the CPU time it used
    /// and whether that is its wall time (no clock reading), which a close
    /// folded into the opening leaves out (the views take the record's own
    /// span); `error`: why the run failed. A close that cannot be folded
    /// (something was recorded inside the run, or it failed) is a record
    /// of its own.
    pub fn close_run(self, cpu: Option<(u64, bool)>, error: Option<String>) {
        self.close_run_timed(|_| cpu, error);
    }

    /// [`DirectSpan::close_run`], with the CPU time worked out by `cpu`
    /// from the run's wall time in nanoseconds, on the layer's clock (the
    /// close's own reading: one clock reading where the caller timing the
    /// run itself would take two). `cpu` is called exactly once: told 0
    /// when there is no opening time (nothing was recorded at the open, or
    /// the span is not from [`open_run`]) or its layer is gone; else, when the close is
    /// recorded, while this thread's buffer is held, so a record `cpu`
    /// tried to make would be dropped (the runtime's reads a clock and
    /// records nothing).
    pub fn close_run_timed(
        mut self,
        cpu: impl FnOnce(u64) -> Option<(u64, bool)>,
        error: Option<String>,
    ) {
        if !self.packed || self.id == 0 {
            let cpu = cpu(0);
            if self.id == 0 {
                return;
            }
            self.close(|fields, folded| {
                match cpu {
                    Some((_, true)) if folded => {}
                    Some((used, _)) => fields.push("cpu_nanos", FieldValue::U64(used)),
                    None => {}
                }
                if let Some(error) = error {
                    fields.push("error", FieldValue::Str(error.into()));
                }
            });
            return;
        }
        let (id, parent, names) = (self.id, self.parent, (self.name, self.target));
        self.id = 0;
        let opened = self.opened;
        let Some(shared) = TARGET.get().filter(|s| !s.layer_gone()) else {
            layer::track_direct_span(id, false);
            let _ = cpu(0);
            return;
        };
        // `cpu` moves into the writer; if the writer never runs (this
        // thread's buffer unusable), it is called after, with the clock's
        // own reading.
        let mut cpu = Some(cpu);
        let written = append_packed(shared, SpanOp::Close(id), |batch, stamp| {
            let cpu = cpu
                .take()
                .and_then(|cpu| cpu(stamp.at.saturating_sub(opened)));
            let used = cpu.map(|(used, _)| used);
            match error {
                None => {
                    let folded_cpu = cpu.and_then(|(used, wall)| (!wall).then_some(used));
                    if !batch.fold_close(id, stamp.at, folded_cpu) {
                        batch.push_close(stamp.thread, stamp.at, id, parent, names, used);
                    }
                }
                Some(error) => {
                    let mut fields = Fields::new();
                    if let Some(used) = used {
                        fields.push("cpu_nanos", FieldValue::U64(used));
                    }
                    fields.push("error", FieldValue::Str(error.into()));
                    batch.push_full(Record {
                        kind: RecordKind::SpanClose,
                        span: id,
                        parent,
                        name: names.0,
                        target: names.1,
                        at_nanos: stamp.at,
                        thread: stamp.thread,
                        fields,
                    });
                }
            }
        });
        if written.is_none() {
            layer::track_direct_span(id, false);
            if let Some(cpu) = cpu.take() {
                let _ = cpu(shared.now().saturating_sub(opened));
            }
        }
    }

    fn close(&mut self, fill: impl FnOnce(&mut Fields, bool)) {
        if self.id == 0 {
            return;
        }
        if self.packed {
            // Dropped without `close_run`: closed with nothing to say.
            let span = std::mem::replace(self, DirectSpan::NONE);
            span.close_run(None, None);
            return;
        }
        // Closed even if recording was turned off meanwhile, as long as the
        // target's layer is alive: the views then never see a span left open.
        // The append takes the span off this thread's stack; when nothing
        // is appended, it comes off here.
        let closed = TARGET.get().filter(|s| !s.layer_gone()).and_then(|shared| {
            append_merging(
                shared,
                Kind::DirectClose(self.id),
                self.parent,
                (self.name, self.target),
                fill,
            )
        });
        if closed.is_none() {
            layer::track_direct_span(self.id, false);
        }
        self.id = 0;
    }
}

impl Drop for DirectSpan {
    fn drop(&mut self) {
        self.close(|_, _| {});
    }
}
