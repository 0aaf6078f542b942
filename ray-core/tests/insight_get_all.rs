//! `get_all` records one `object.get` per ref read, with its bytes; a
//! failed ref ends it with its error, the refs read before it recorded
//! (one test per file: it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use ray_core::prelude::*;
use ray_insight::{InsightLayer, MemorySink, RecordKind};

#[remote]
fn bytes_of(n: u64) -> Vec<u8> {
    vec![7; n as usize]
}

#[remote]
fn fails(n: u64) -> u64 {
    if n == 1 {
        panic!("ref {n} fails");
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_all_records_a_get_for_each_ref_it_read() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;

    // 150 refs, of 0 to 149 bytes.
    let refs: Vec<_> = (0..150u64)
        .map(|n| bytes_of::remote(&ray, n).expect("submit"))
        .collect();
    let values = ray.get_all(&refs).await.expect("all ready");
    assert_eq!(values.len(), 150);
    assert!(values.iter().enumerate().all(|(n, v)| v.len() == n));

    let failing: Vec<_> = (0..3u64)
        .map(|n| fails::remote(&ray, n).expect("submit"))
        .collect();
    // Ref 0 must be ready first, so that it is read before ref 1 fails.
    failing[0].get().await.expect("ref 0");
    let err = ray.get_all(&failing).await.expect_err("ref 1 fails");
    assert!(err.to_string().contains("ref 1 fails"), "{err}");

    InsightLayer::flush_current_thread();
    let mut sink = MemorySink::new(1_000_000);
    collector.drain_into(&mut sink);
    let get_records: Vec<_> = sink
        .records()
        .iter()
        .filter(|r| r.kind == RecordKind::Event && r.name == "object.get")
        .collect();
    let gets: Vec<(u128, u64)> = get_records
        .iter()
        .map(|r| {
            (
                r.field("object_id").and_then(|v| v.as_u128()).expect("id"),
                r.field("bytes").and_then(|v| v.as_u64()).expect("bytes"),
            )
        })
        .collect();
    for (n, r) in refs.iter().enumerate() {
        let id = r.id().as_u128();
        let of_ref: Vec<_> = gets.iter().filter(|(o, _)| *o == id).collect();
        assert_eq!(of_ref.len(), 1, "ref {n} read once");
        // The encoded vector: at least its n bytes.
        assert!(of_ref[0].1 >= n as u64, "ref {n}: {} bytes", of_ref[0].1);
    }
    // Ref 0 of the failing three: once by its own `get`, once by
    // `get_all`; refs 1 and 2 never read.
    let count = |r: &ObjectRef<u64>| gets.iter().filter(|(o, _)| *o == r.id().as_u128()).count();
    assert_eq!(count(&failing[0]), 2);
    assert_eq!(count(&failing[1]), 0);
    assert_eq!(count(&failing[2]), 0);
}
