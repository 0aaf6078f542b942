//! One connection per peer: a cache of live connections by address.

use std::net::SocketAddr;
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::{Connection, Endpoint, TransportError};

/// The connections an [`Endpoint`] has opened, one per peer address.
///
/// [`Connections::get`] returns the live connection to an address, or makes
/// one; callers asking for the same address at the same time share a single
/// connection attempt. A closed connection is replaced on the next `get`.
#[derive(Debug)]
pub struct Connections {
    endpoint: Endpoint,
    // A cell per address so concurrent callers wait on one handshake; the
    // map lock is held only to find or replace a cell, never across I/O.
    by_addr: Mutex<HashMap<SocketAddr, Arc<OnceCell<Connection>>>>,
}

impl Connections {
    /// An empty cache that connects through `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            by_addr: Mutex::new(HashMap::new()),
        }
    }

    /// The endpoint connections are made through.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The live connection to `addr`, connecting if there is none.
    ///
    /// # Errors
    ///
    /// What [`Endpoint::connect`] returns; the next call tries again.
    pub async fn get(&self, addr: SocketAddr) -> Result<Connection, TransportError> {
        let cell = {
            let mut by_addr = self.by_addr.lock();
            let cell = by_addr.entry(addr).or_default();
            if cell.get().is_some_and(|conn| !conn.is_open()) {
                *cell = Arc::default();
            }
            cell.clone()
        };
        cell.get_or_try_init(|| self.endpoint.connect(addr))
            .await
            .cloned()
    }

    /// Forgets the connection to `addr` and returns it, if one was made.
    /// It stays open for other holders; close it to end it.
    pub fn remove(&self, addr: SocketAddr) -> Option<Connection> {
        let cell = self.by_addr.lock().remove(&addr)?;
        cell.get().cloned()
    }

    /// How many peers have a live connection.
    pub fn len(&self) -> usize {
        self.by_addr
            .lock()
            .values()
            .filter(|cell| cell.get().is_some_and(Connection::is_open))
            .count()
    }

    /// True when no peer has a live connection.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
