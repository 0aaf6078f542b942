//! Borrowed objects: refs owned elsewhere become local table entries filled
//! by fetching from their owner (through the [`FetchCache`]), and the wire
//! form of a task's arguments.

use ray_proto::wire::WireRef;

use super::*;

impl ClusterCore {
    /// Fetches object `id` from the process at `addr` (a task's value
    /// kept by its worker: refs in it came with the result).
    pub(super) async fn fetch(
        &self,
        addr: SocketAddr,
        id: ObjectId,
        take: bool,
    ) -> Result<ObjectBuffer, Error> {
        let lost = |cause: String| Error::ObjectLost { object: id, cause };
        self.fetch_or(addr, id, take, lost)
            .await
            .map(|(buf, _)| buf)
    }

    /// Fetches object `id` from the process at `addr`, with the refs
    /// nested in it (lent to this process); `unreachable` makes the error
    /// when that process cannot be reached, or the transfer broke with the
    /// connection (a transfer failing on a connection that lives on is
    /// `ObjectLost`; the holder's answers, errors included, come back as
    /// they are).
    pub(super) async fn fetch_or(
        &self,
        addr: SocketAddr,
        id: ObjectId,
        take: bool,
        unreachable: impl Fn(String) -> Error,
    ) -> Result<(ObjectBuffer, Vec<WireRef>), Error> {
        let conn = self
            .conns
            .get(addr)
            .await
            .map_err(|e| unreachable(format!("its holder at {addr} is unreachable: {e}")))?;
        let from = self.rt().map_or(WorkerId(0), |rt| rt.worker);
        let request = Envelope::new(GetObject { id, from, take }.into());
        let (reply, bytes) = conn
            .request_bulk(&request, MAX_OBJECT_LEN)
            .await
            .map_err(|e| {
                let cause = format!("transfer from {addr} failed: {e}");
                match conn.is_open() {
                    true => Error::ObjectLost { object: id, cause },
                    false => unreachable(cause),
                }
            })?;
        match (GetObject::reply(reply.body), bytes) {
            (Ok(ObjectReply::Follows(ObjectFollows { refs, .. })), Some(bytes)) => {
                Ok((ObjectBuffer::from_aligned(bytes), refs))
            }
            (Ok(ObjectReply::Failed(ObjectFailed { error })), _) => Err(error_from_wire(error, "")),
            (other, _) => {
                let other = other.map_or_else(|message| message, Message::from);
                Err(Error::ObjectLost {
                    object: id,
                    cause: format!("{addr} answered {other:?}"),
                })
            }
        }
    }

    /// A counted ref to `id`, owned by another process: a borrowed entry of
    /// the local table, filled by fetching the value from its owner.
    pub(crate) fn borrow(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        id: ObjectId,
        owner: Option<String>,
    ) -> Arc<RefHandle> {
        self.borrow_as(rt, id, owner, false)
    }

    /// [`borrow`](Self::borrow); `lazy`: the fetch waits until someone
    /// wants the value (a ref nested in a value that arrived).
    pub(super) fn borrow_as(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        id: ObjectId,
        owner: Option<String>,
        lazy: bool,
    ) -> Arc<RefHandle> {
        let (handle, created) = rt.objects.get_or_insert_pending(rt, id);
        if !created {
            return handle;
        }
        // Known even when the copy is kept here: a ref passed on to another
        // process names its owner's address.
        if let Some(o) = &owner {
            self.worker_addrs.lock().insert(id.owner, o.clone());
        }
        // An actor's key has no bytes to fetch.
        let kept = match super::actors::actor_of_key(id) {
            Some(_) => Some(ObjectBuffer::copy_from_slice(&[])),
            None => self.fetched.lock().get(id),
        };
        if let Some(buf) = kept {
            rt.complete_object(
                id,
                Ok(Encoded {
                    buf,
                    nested: Vec::new(),
                }),
            );
        } else if lazy {
            handle.cell.set_lazy();
            // Someone who found the entry before it was marked waits on it.
            if handle.cell.has_waiters() {
                handle.fetch_if_lazy();
            }
        } else {
            self.start_fetch(rt, id);
        }
        handle
    }

    /// Fetches borrowed object `id` from its owner into its entry here.
    pub(crate) fn start_fetch(self: &Arc<Self>, rt: &Arc<Runtime>, id: ObjectId) {
        let me = self.clone();
        let rt = rt.clone();
        self.tokio.spawn(async move {
            // Borrowed values come from their owner: if it cannot be
            // reached, it is gone, and its objects with it.
            let owner_died = |cause: String| Error::OwnerDied {
                object: id,
                owner: id.owner,
                cause,
            };
            let out = match me.worker_addr(id.owner).await {
                Ok(addr) => me.fetch_or(addr, id, false, owner_died).await,
                Err(e) => Err(e),
            };
            let out = out.map(|(buf, refs)| {
                // A copy with refs in it is not kept for later borrowers:
                // each fetch gets its refs lent anew.
                if refs.is_empty() {
                    me.fetched.lock().record(id, buf.clone());
                }
                let nested = me.receive_refs(&rt, refs, true);
                Encoded { buf, nested }
            });
            rt.complete_object(id, out);
        });
    }

    pub(super) async fn worker_addr(&self, worker: WorkerId) -> Result<SocketAddr, Error> {
        let known = self.worker_addrs.lock().get(&worker).cloned();
        let addr = match known {
            Some(a) => a,
            None => {
                let a = self
                    .gcs
                    .get_worker(worker)
                    .await
                    .map_err(Error::cluster_source)?
                    .ok_or_else(|| {
                        Error::cluster(format!("{worker} is not in the worker table"))
                    })?;
                self.worker_addrs.lock().insert(worker, a.clone());
                a
            }
        };
        parse_addr(&addr)
    }

    pub(super) fn owner_addr_now(&self, owner: WorkerId, me: WorkerId) -> Option<String> {
        if owner == me {
            Some(self.my_addr.clone())
        } else {
            self.worker_addrs.lock().get(&owner).cloned()
        }
    }

    /// `args` in wire form if every owner address is known now.
    pub(super) fn wire_args_now(&self, args: &[TaskArg]) -> Option<Vec<WireArg>> {
        let rt = self.rt()?;
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            out.push(match &a.0 {
                ArgKind::Value(buf, nested) if nested.is_empty() => {
                    WireArg::Value(buf.as_bytes().to_vec())
                }
                // The task's owner holds `nested` (with the task's
                // arguments) until the result is back.
                ArgKind::Value(buf, nested) => WireArg::Nested {
                    bytes: buf.as_bytes().to_vec(),
                    refs: self.wire_refs_now(nested)?,
                },
                ArgKind::Ref(h) => WireArg::Ref {
                    id: h.id,
                    owner: self.owner_addr_now(h.id.owner, rt.worker)?,
                },
            });
        }
        Some(out)
    }

    /// `args` in wire form, looking up owner addresses as needed.
    pub(super) async fn wire_args(&self, args: &[TaskArg]) -> Result<Vec<WireArg>, Error> {
        if let Some(a) = self.wire_args_now(args) {
            return Ok(a);
        }
        for a in args {
            match &a.0 {
                ArgKind::Ref(h) => {
                    self.worker_addr(h.id.owner).await?;
                }
                ArgKind::Value(_, nested) => {
                    self.wire_refs(nested).await?;
                }
            }
        }
        self.wire_args_now(args).ok_or(Error::ShutDown)
    }

    // ---------------------------------------------------------------
    // Owner: actors
    // ---------------------------------------------------------------
}
