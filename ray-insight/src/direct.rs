//! The runtime's own records, written straight into an [`InsightLayer`](crate::InsightLayer)'s
//! per-thread buffers without going through `tracing`'s dispatch.
//!
//! Recording a runtime span through `tracing` costs a registry slot, an
//! extension map, a field visitor and a walk up the span tree, on every task
//! and actor call. The records the runtime writes here are the same
//! [`Record`](crate::Record)s, built in place in the calling thread's
//! buffer, so the views, the log and shipping see no difference. When no
//! layer is the target ([`InsightLayer::record_runtime_directly`](crate::InsightLayer::record_runtime_directly)),
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
use std::time::Instant;

use crate::layer::{self, append, append_merging, Kind};
use crate::queue::Shared;
use crate::record::Fields;

/// The layer the runtime records into directly, once one asked to be.
static TARGET: OnceLock<(Arc<Shared>, Instant)> = OnceLock::new();

/// Whether [`TARGET`] is set and its layer still alive.
static ON: AtomicBool = AtomicBool::new(false);

/// Makes `shared`'s layer the target; false if another layer is.
pub(crate) fn install(shared: Arc<Shared>, epoch: Instant) -> bool {
    let target = TARGET.get_or_init(|| (Arc::clone(&shared), epoch));
    let ours = Arc::ptr_eq(&target.0, &shared) && !shared.layer_gone();
    if ours {
        ON.store(true, Ordering::Release);
    }
    ours
}

/// Stops direct recording if `shared`'s layer was the target (it is being
/// dropped).
pub(crate) fn uninstall(shared: &Arc<Shared>) {
    if TARGET.get().is_some_and(|t| Arc::ptr_eq(&t.0, shared)) {
        ON.store(false, Ordering::Release);
    }
}

/// Whether the runtime should record directly: one relaxed load.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

fn target() -> Option<&'static (Arc<Shared>, Instant)> {
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
    if let Some((shared, epoch)) = target() {
        let parent = layer::current_direct_span();
        append(
            shared,
            *epoch,
            Kind::Event,
            parent,
            (name, target_name),
            fill,
        );
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
    let Some((shared, epoch)) = target() else {
        return DirectSpan::NONE;
    };
    let parent = layer::current_direct_span();
    let Some(id) = append(
        shared,
        *epoch,
        Kind::SpanNew,
        parent,
        (name, target_name),
        fill,
    ) else {
        return DirectSpan::NONE;
    };
    layer::track_direct_span(id, true);
    DirectSpan {
        id,
        parent,
        name,
        target: target_name,
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
    _thread: PhantomData<*const ()>,
}

impl DirectSpan {
    const NONE: DirectSpan = DirectSpan {
        id: 0,
        parent: 0,
        name: "",
        target: "",
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
    /// fields.
    pub fn close_with(mut self, fill: impl FnOnce(&mut Fields, bool)) {
        self.close(fill);
    }

    fn close(&mut self, fill: impl FnOnce(&mut Fields, bool)) {
        if self.id == 0 {
            return;
        }
        layer::track_direct_span(self.id, false);
        // Closed even if recording was turned off meanwhile, as long as the
        // target's layer is alive: the views then never see a span left open.
        if let Some((shared, epoch)) = TARGET.get().filter(|(s, _)| !s.layer_gone()) {
            append_merging(
                shared,
                *epoch,
                Kind::DirectClose(self.id),
                self.parent,
                (self.name, self.target),
                fill,
            );
        }
        self.id = 0;
    }
}

impl Drop for DirectSpan {
    fn drop(&mut self) {
        self.close(|_, _| {});
    }
}
