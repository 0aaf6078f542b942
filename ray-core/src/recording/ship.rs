//! A cluster process's records shipped to the head's collector (feature
//! `cluster`).

use super::*;

/// Makes this cluster process ship its records of `job` to the head through
/// `gcs`, on `tokio`.
pub(crate) fn ship_to_head(
    insight: &Insight,
    job: JobId,
    worker: WorkerId,
    gcs: crate::cluster::GcsClient,
    tokio: &tokio::runtime::Handle,
) {
    let shipper = Arc::new(Shipper {
        job,
        worker,
        epoch_unix_nanos: insight.inner.collector.epoch_unix_nanos(),
        queue: Mutex::new(VecDeque::new()),
        queued: tokio::sync::Notify::new(),
        drained: tokio::sync::Notify::new(),
        lost_records: AtomicU64::new(0),
        in_flight: AtomicBool::new(false),
    });
    *insight.inner.ship.lock() = Some(shipper.clone());
    let weak = Arc::downgrade(&shipper);
    drop(shipper);
    tokio.spawn(async move {
        loop {
            let Some(shipper) = weak.upgrade() else {
                return;
            };
            // Marked in flight before the queue shows it gone, so `flush`
            // never sees an empty queue and nothing in flight too early.
            shipper.in_flight.store(true, Ordering::Release);
            let next = shipper.queue.lock().pop_front();
            match next {
                Some((records, bytes)) => {
                    let sent = gcs
                        .insight_batch(shipper.job, shipper.worker, shipper.epoch_unix_nanos, bytes)
                        .await;
                    if let Err(e) = sent {
                        shipper.lost_records.fetch_add(records, Ordering::Relaxed);
                        tracing::debug!(target: "ray::insight", error = %e, "insight.ship_failed");
                    }
                }
                None => {
                    shipper.in_flight.store(false, Ordering::Release);
                    shipper.drained.notify_waiters();
                    // A batch queued meanwhile left a permit: no wake-up is
                    // lost. The timeout lets a dropped shipper end the loop.
                    let queued = shipper.queued.notified();
                    let _ = tokio::time::timeout(Duration::from_secs(1), queued).await;
                }
            }
        }
    });
}
