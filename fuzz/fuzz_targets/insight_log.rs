//! The insight event-log decoder, and every view built from what it
//! decodes, on arbitrary bytes: errors or views, never a panic, and no
//! figure that wraps (a debug build panics on overflow; the views use
//! saturating arithmetic on every figure built from recorded input).
//!
//! An event log is read back from disk, written by any process of a job:
//! its bytes are untrusted. The decoded records replay into the views,
//! whose snapshot is exported in every format each view supports; the
//! runtime's compact shapes are also applied as they are (`Chunk`), as
//! the head applies a shipped batch.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ray_insight::export::{export, ViewKind};
use ray_insight::log::{decode_records, replay, Chunk};
use ray_insight::{Limits, Views};

fuzz_target!(|data: &[u8]| {
    let Ok(records) = decode_records(data) else {
        return;
    };
    let views = replay(&records, Limits::default(), None);
    export_all(&views);
    // The same batch applied as the head applies a shipped one: the
    // runtime's compact shapes read as they are.
    if let Ok(chunk) = Chunk::decode(data) {
        let mut views = Views::default();
        chunk.apply_to(&mut views);
        export_all(&views);
    }
});

fn export_all(views: &Views) {
    let snapshot = views.snapshot();
    let _ = snapshot.flame().by_class();
    for view in ViewKind::ALL {
        for &format in view.formats() {
            let _ = export(&snapshot, view, format);
        }
    }
}
