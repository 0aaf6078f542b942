//! Hooks a program calls so that insight can slice its views: context labels.
//!
//! ray-core does not depend on ray-insight; these functions only emit
//! `tracing` events that an insight layer, if installed, records.

/// Labels the current task (or the driver, outside any task) with
/// `key = value` pairs, e.g. `context(&[("dp_rank", "0")])`.
///
/// Tasks and actor calls submitted afterwards from the labelled task inherit
/// its labels, so an insight view filtered on `dp_rank = 0` keeps the task and
/// everything it started. Later calls add labels or override earlier values.
///
/// It emits one `context` event (target `ray::insight`) with the current
/// `task_id` (absent in the driver) and the labels packed into one field,
/// `labels = "k1=v1,k2=v2"`, because `tracing` field names must be static.
/// So a key must not contain `,` or `=`, and a value must not contain `,`;
/// such labels would be split differently when read back. Without a
/// subscriber this does nothing beyond formatting the labels.
///
/// ```
/// // In the driver (no task), or inside a task to label it and its children.
/// ray_core::insight::context(&[("dp_rank", "0"), ("stage", "warmup")]);
/// ```
pub fn context(labels: &[(&str, &str)]) {
    let mut packed = String::new();
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            packed.push(',');
        }
        packed.push_str(key);
        packed.push('=');
        packed.push_str(value);
    }
    tracing::trace!(
        name: "context",
        target: "ray::insight",
        task_id = crate::context::current_task().map(tracing::field::display),
        labels = packed.as_str()
    );
}
