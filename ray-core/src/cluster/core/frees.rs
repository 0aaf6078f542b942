//! Free notices: an owner remembers who fetched its large objects and,
//! when it frees one, tells them in one `ObjectsFreed` per burst so they
//! drop their copies.

use super::*;

impl ClusterCore {
    /// Objects fetched from other processes so far, their bytes, and the
    /// bytes of fetched objects kept now.
    pub(crate) fn fetch_counts(&self) -> (u64, u64, u64) {
        let cache = self.fetched.lock();
        (cache.fetches, cache.fetched_bytes, cache.bytes as u64)
    }

    /// Remembers that `peer` fetched `id`, when this process owns it.
    pub(super) fn note_served(&self, id: ObjectId, peer: SocketAddr) {
        if self.rt().is_none_or(|rt| rt.worker != id.owner) {
            return;
        }
        let mut served = self.served.lock();
        let peers = served.entry(id).or_insert_with(|| {
            self.serving.fetch_add(1, Ordering::Relaxed);
            Vec::new()
        });
        if !peers.contains(&peer) {
            peers.push(peer);
        }
    }

    /// `id` left this process's table. Owned here: the processes that
    /// fetched it drop the copies they kept. Borrowed with registrations:
    /// its owner is told. Notices go from the I/O runtime, one per process
    /// for all the frees queued by the time it sends.
    pub(crate) fn object_freed(self: &Arc<Self>, id: ObjectId, registrations: u32) {
        if registrations > 0 {
            self.borrow_released(id, registrations);
        }
        if let Some(actor) = super::actors::actor_of_key(id) {
            self.actor_key_freed(actor);
            return;
        }
        if self.serving.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(peers) = self.served.lock().remove(&id) else {
            return;
        };
        self.serving.fetch_sub(1, Ordering::Relaxed);
        let start_sender = {
            let mut unsent = self.unsent_frees.lock();
            let idle = unsent.is_empty();
            for peer in peers {
                unsent.entry(peer).or_default().push(id);
            }
            idle
        };
        if start_sender {
            let me = self.clone();
            self.tokio.spawn(async move { me.send_frees().await });
        }
    }

    /// Sends the queued free notices until none are left.
    pub(super) async fn send_frees(self: Arc<Self>) {
        loop {
            let batch: Vec<(SocketAddr, Vec<ObjectId>)> = {
                let mut unsent = self.unsent_frees.lock();
                if unsent.is_empty() {
                    // Emptied under the lock: the next free starts a sender.
                    return;
                }
                unsent.drain().collect()
            };
            for (peer, ids) in batch {
                let notice = Envelope::new(ObjectsFreed { ids }.into());
                // A peer gone or unreachable has no copy left to drop.
                if let Ok(conn) = self.conns.get(peer).await {
                    let _ = conn.request(&notice).await;
                }
            }
        }
    }
}
