use std::collections::BTreeMap;

use crate::{GcsConfig, HealthConfig};
use ray_proto::wire::{ActorEntry, ActorStatus, ResourceAmount, WorkerEntry};
use ray_proto::wire::{ActorFailed, ActorNow, GcsReply, WorkerInfo as WorkerAddress};

use super::*;

/// The SHA-256 of `bytes`, as the shell hashes uploads.
fn binary_hash(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut hash = [0; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn state(timeout: Duration) -> State {
    let gcs = Gcs::with_config(
        crate::MemoryStorage::new(),
        GcsConfig {
            health: HealthConfig::new(timeout),
            ..GcsConfig::default()
        },
    );
    // Nodes heartbeat five times per timeout, as the shell tells them.
    State::new(gcs, timeout / 5)
}

/// The reply `request` gets; panics if the service wants bytes moved.
fn reply(state: &mut State, request: impl Into<GcsRequest>, now: Duration) -> Message {
    match handle(state, request.into(), now) {
        Action::Reply(reply) => reply,
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// The answer to any message, as the shell gives it.
fn answer(state: &mut State, message: Message, now: Duration) -> Message {
    match handle_message(state, message, now) {
        Action::Reply(reply) => reply,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn register(state: &mut State, now: Duration) -> NodeId {
    let request = RegisterNode {
        address: "127.0.0.1:1".into(),
        resources: vec![cpu(20_000)],
        labels: labels_to_wire(&labels(&[("zone", "a")])),
    };
    match reply(state, request, now) {
        Message::GcsReply(GcsReply::NodeRegistered(NodeRegistered {
            node,
            heartbeat_interval_ms,
        })) => {
            assert_eq!(heartbeat_interval_ms, 200);
            node
        }
        other => panic!("{other:?}"),
    }
}

fn cpu(raw: u64) -> ResourceAmount {
    ResourceAmount {
        name: "CPU".into(),
        raw,
    }
}

fn nodes(state: &mut State) -> Vec<NodeEntry> {
    match reply(state, GetNodes, Duration::ZERO) {
        Message::GcsReply(GcsReply::Nodes(Nodes { nodes })) => nodes,
        other => panic!("{other:?}"),
    }
}

fn heartbeat(node: NodeId, version: u64, used: Vec<ResourceAmount>) -> Heartbeat {
    Heartbeat {
        node,
        version,
        used,
    }
}

/// Registers a job of binary `hash`; returns its id, its driver's id and
/// whether the GCS asked for an upload.
fn register_job(state: &mut State, hash: [u8; 32]) -> (JobId, WorkerId, bool) {
    let request = RegisterJob {
        driver: "main".into(),
        driver_address: "127.0.0.1:4000".into(),
        binary_hash: hash,
        fingerprint: BuildFingerprint([9; 32]),
        config: wire::JobConfig::default(),
    };
    match reply(state, request, Duration::ZERO) {
        Message::GcsReply(GcsReply::JobRegistered(JobRegistered {
            job,
            worker,
            upload,
        })) => (job, worker, upload),
        other => panic!("{other:?}"),
    }
}

fn running(state: &mut State, job: JobId) -> bool {
    match reply(state, GetJobs, Duration::ZERO) {
        Message::GcsReply(GcsReply::Jobs(Jobs { jobs })) => {
            jobs.iter().any(|j| j.id == job && j.running)
        }
        other => panic!("{other:?}"),
    }
}

/// Uploads `bytes` as binary `hash` the way the shell does.
fn upload(state: &mut State, hash: [u8; 32], bytes: &[u8]) -> Message {
    let request = UploadBinary {
        hash,
        len: bytes.len() as u64,
    };
    match handle(state, request.into(), Duration::ZERO) {
        Action::ReceiveBinary { hash: h, len } => {
            assert_eq!((h, len), (hash, bytes.len() as u64));
            let mut buf = AlignedVec::<16>::new();
            buf.extend_from_slice(bytes);
            store_binary(state, hash, binary_hash(bytes), Arc::new(buf))
        }
        Action::Reply(reply) => reply,
        Action::SendBinary(_) => panic!("an upload sends nothing back"),
    }
}

fn actor_entry(job: JobId, seq: u64, name: &str, status: ActorStatus) -> ActorEntry {
    ActorEntry {
        id: ActorId::new(WorkerId(1), seq),
        class_name: "Counter".into(),
        name: Some(name.into()),
        namespace: "ns".into(),
        job,
        detached: false,
        status,
    }
}

fn lookup(state: &mut State, name: &str) -> Message {
    let request = LookupActor {
        namespace: "ns".into(),
        name: name.into(),
    };
    reply(state, request, Duration::ZERO)
}

#[test]
fn registered_nodes_get_fresh_ids_and_are_listed() {
    let mut s = state(Duration::from_secs(1));
    assert_eq!(register(&mut s, Duration::ZERO), NodeId(1));
    assert_eq!(register(&mut s, Duration::ZERO), NodeId(2));
    let listed = nodes(&mut s);
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|n| n.alive && n.labels.len() == 1));
    assert_eq!(listed[0].resources[0].raw, 20_000);
}

#[test]
fn silent_node_is_dead_and_its_heartbeat_is_refused() {
    let mut s = state(Duration::from_secs(1));
    let quiet = register(&mut s, Duration::ZERO);
    let chatty = register(&mut s, Duration::ZERO);
    let at = Duration::from_millis(800);
    assert_eq!(
        reply(&mut s, heartbeat(chatty, 1, Vec::new()), at),
        Message::Ok
    );
    assert_eq!(s.gcs.check_health(Duration::from_millis(1500)), vec![quiet]);
    let listed = nodes(&mut s);
    assert!(!listed[0].alive && listed[0].death_cause.is_some());
    assert!(listed[1].alive);
    assert!(matches!(
        reply(
            &mut s,
            heartbeat(quiet, 1, Vec::new()),
            Duration::from_millis(1600)
        ),
        Message::Error { .. }
    ));
}

#[test]
fn heartbeat_load_reports_fill_node_entries_and_older_ones_are_ignored() {
    let mut s = state(Duration::from_secs(1));
    let node = register(&mut s, Duration::ZERO);
    let before = &nodes(&mut s)[0];
    assert!(before.used.is_empty());
    assert_eq!(before.version, 0);

    reply(
        &mut s,
        heartbeat(node, 5, vec![cpu(15_000)]),
        Duration::ZERO,
    );
    // A report that was overtaken on the wire arrives late.
    reply(&mut s, heartbeat(node, 4, vec![cpu(5_000)]), Duration::ZERO);
    let after = &nodes(&mut s)[0];
    assert_eq!(after.used, vec![cpu(15_000)]);
    assert_eq!(after.version, 5);
}

#[test]
fn kv_put_then_get_and_unknown_requests_are_errors() {
    let mut s = state(Duration::from_secs(1));
    let put = KvPut {
        namespace: "ns".into(),
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        overwrite: false,
    };
    assert_eq!(
        reply(&mut s, put.clone(), Duration::ZERO),
        Message::from(KvPutDone { written: true })
    );
    assert_eq!(
        reply(&mut s, put, Duration::ZERO),
        Message::from(KvPutDone { written: false })
    );
    let get = KvGet {
        namespace: "ns".into(),
        key: b"k".to_vec(),
    };
    assert_eq!(
        reply(&mut s, get, Duration::ZERO),
        Message::from(KvValue {
            value: Some(b"v".to_vec())
        })
    );
    assert!(matches!(
        answer(&mut s, Message::Ok, Duration::ZERO),
        Message::Error { reason } if reason.contains("Ok")
    ));
}

#[test]
fn register_job_asks_for_an_upload_only_until_the_binary_is_stored() {
    let mut s = state(Duration::from_secs(1));
    let binary = b"\x7fELF pretend executable".to_vec();
    let hash = binary_hash(&binary);
    let (first, driver1, upload1) = register_job(&mut s, hash);
    assert!(upload1);
    assert_eq!(upload(&mut s, hash, &binary), Message::Ok);
    let (second, driver2, upload2) = register_job(&mut s, hash);
    assert!(!upload2);
    assert_ne!(first, second);
    assert_ne!(driver1, driver2);
    assert!(running(&mut s, first) && running(&mut s, second));
    assert_eq!(
        s.job_binary(first),
        Some(JobBinary {
            hash,
            fingerprint: BuildFingerprint([9; 32])
        })
    );
    // The driver's address is known under its worker id.
    assert_eq!(
        reply(&mut s, GetWorker { worker: driver1 }, Duration::ZERO),
        Message::from(WorkerAddress {
            address: Some("127.0.0.1:4000".into())
        })
    );
}

#[test]
fn uploaded_binary_is_fetched_back_and_a_second_upload_is_answered_at_once() {
    let mut s = state(Duration::from_secs(1));
    let binary: Vec<u8> = (0..=255).cycle().take(10_000).collect();
    let hash = binary_hash(&binary);
    assert!(matches!(
        reply(&mut s, FetchBinary { hash }, Duration::ZERO),
        Message::Error { reason } if reason.starts_with("unknown binary ") && reason.contains(&hex(&hash))
    ));
    assert_eq!(upload(&mut s, hash, &binary), Message::Ok);
    match handle(&mut s, FetchBinary { hash }.into(), Duration::ZERO) {
        Action::SendBinary(bytes) => assert_eq!(bytes.as_slice(), &binary[..]),
        other => panic!("{other:?}"),
    }
    let again = UploadBinary {
        hash,
        len: binary.len() as u64,
    };
    assert!(matches!(
        handle(&mut s, again.into(), Duration::ZERO),
        Action::Reply(Message::Ok)
    ));
}

#[test]
fn binary_whose_content_does_not_match_its_hash_is_refused() {
    let mut s = state(Duration::from_secs(1));
    let claimed = binary_hash(b"the real binary");
    assert!(matches!(
        upload(&mut s, claimed, b"something else"),
        Message::Error { reason } if reason.contains("hashes to")
    ));
    assert!(matches!(
        reply(&mut s, FetchBinary { hash: claimed }, Duration::ZERO),
        Message::Error { .. }
    ));
    let huge = UploadBinary {
        hash: claimed,
        len: MAX_BINARY_LEN + 1,
    };
    assert!(matches!(
        reply(&mut s, huge, Duration::ZERO),
        Message::Error { reason } if reason.contains("exceeds")
    ));
}

#[test]
fn finished_job_is_not_running_and_registers_no_workers() {
    let mut s = state(Duration::from_secs(1));
    let node = register(&mut s, Duration::ZERO);
    let (job, driver, _) = register_job(&mut s, [1; 32]);
    let worker = match reply(
        &mut s,
        RegisterWorker {
            job,
            node,
            address: "127.0.0.1:5000".into(),
        },
        Duration::ZERO,
    ) {
        Message::GcsReply(GcsReply::WorkerRegistered(WorkerRegistered { worker, .. })) => worker,
        other => panic!("{other:?}"),
    };
    assert_ne!(worker, driver);
    assert_eq!(
        reply(&mut s, GetWorker { worker }, Duration::ZERO),
        Message::from(WorkerAddress {
            address: Some("127.0.0.1:5000".into())
        })
    );
    assert_eq!(
        reply(&mut s, FinishJob { job }, Duration::ZERO),
        Message::Ok
    );
    assert!(!running(&mut s, job));
    assert!(matches!(
        reply(
            &mut s,
            RegisterWorker {
                job,
                node,
                address: "127.0.0.1:5001".into()
            },
            Duration::ZERO
        ),
        Message::Error { .. }
    ));
    assert_eq!(
        reply(
            &mut s,
            GetWorker {
                worker: WorkerId(999)
            },
            Duration::ZERO
        ),
        Message::from(WorkerAddress { address: None })
    );
}

#[test]
fn driver_gone_finishes_its_job_once() {
    let mut s = state(Duration::from_secs(1));
    let (job, _, _) = register_job(&mut s, [2; 32]);
    driver_gone(&mut s, job, Duration::from_secs(3));
    assert!(!running(&mut s, job));
    // A driver that said FinishJob and then disconnected: nothing changes.
    driver_gone(&mut s, job, Duration::from_secs(4));
    assert!(!running(&mut s, job));
}

#[test]
fn named_actor_is_found_until_its_job_finishes_and_names_are_unique() {
    let mut s = state(Duration::from_secs(1));
    let node = register(&mut s, Duration::ZERO);
    let (job, driver, _) = register_job(&mut s, [3; 32]);
    let entry = actor_entry(job, 1, "counter", ActorStatus::Alive { node });
    let id = entry.id;
    let register = |s: &mut State, entry| {
        let request = RegisterActor {
            entry,
            worker: driver,
            address: "127.0.0.1:4000".into(),
            max_restarts: 0,
        };
        reply(s, request, Duration::ZERO)
    };
    assert_eq!(register(&mut s, entry), Message::Ok);
    assert_eq!(
        lookup(&mut s, "counter"),
        Message::from(ActorLocation {
            id,
            class_name: "Counter".into(),
            worker: driver,
            address: "127.0.0.1:4000".into(),
        })
    );
    let rival = actor_entry(job, 2, "counter", ActorStatus::PendingCreation);
    assert!(matches!(
        register(&mut s, rival),
        Message::Error { reason } if reason.contains(&id.to_string())
    ));

    reply(&mut s, FinishJob { job }, Duration::ZERO);
    assert!(matches!(
        lookup(&mut s, "counter"),
        Message::Error { reason } if reason.starts_with("no actor named \"counter\"")
    ));
}

#[test]
fn actor_on_a_dead_node_is_refused_and_frees_its_name() {
    let mut s = state(Duration::from_secs(1));
    let node = register(&mut s, Duration::ZERO);
    let (job, driver, _) = register_job(&mut s, [4; 32]);
    s.gcs.check_health(Duration::from_secs(5));
    let request = RegisterActor {
        entry: actor_entry(job, 1, "a", ActorStatus::Alive { node }),
        worker: driver,
        address: "x".into(),
        max_restarts: 0,
    };
    assert!(matches!(
        reply(&mut s, request, Duration::ZERO),
        Message::Error { .. }
    ));
    assert!(matches!(lookup(&mut s, "a"), Message::Error { .. }));
    assert_eq!(s.gcs.named_actor("ns", "a"), None);
}

#[test]
fn a_failed_actor_restarts_within_its_budget_keeping_its_name_then_dies() {
    let mut s = state(Duration::from_secs(1));
    let node = register(&mut s, Duration::ZERO);
    let (job, driver, _) = register_job(&mut s, [6; 32]);
    let entry = actor_entry(job, 1, "phoenix", ActorStatus::Alive { node });
    let id = entry.id;
    let register = |s: &mut State, address: &str| {
        let request = RegisterActor {
            entry: entry.clone(),
            worker: driver,
            address: address.into(),
            max_restarts: 1,
        };
        reply(s, request, Duration::ZERO)
    };
    assert_eq!(register(&mut s, "first"), Message::Ok);
    let failed = |s: &mut State, life| {
        let request = ActorFailed {
            actor: id,
            life,
            cause: "its worker died".into(),
        };
        match reply(s, request, Duration::ZERO) {
            Message::GcsReply(GcsReply::ActorNow(ActorNow { status })) => status,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(failed(&mut s, 0), ActorStatus::Restarting { attempt: 1 });
    // The same failure told twice (its node's death, then its owner)
    // counts once.
    assert_eq!(failed(&mut s, 0), ActorStatus::Restarting { attempt: 1 });
    // Not found while restarting; its name stays taken.
    assert!(matches!(lookup(&mut s, "phoenix"), Message::Error { .. }));
    assert_eq!(s.gcs.named_actor("ns", "phoenix"), Some(id));
    // Its next life registers where it runs now.
    assert_eq!(register(&mut s, "second"), Message::Ok);
    assert!(matches!(
        lookup(&mut s, "phoenix"),
        Message::GcsReply(GcsReply::ActorLocation(ActorLocation { address, .. })) if address == "second"
    ));
    // The one restart is used: the next failure is death, freeing the name.
    assert!(matches!(failed(&mut s, 1), ActorStatus::Dead { cause } if cause == "its worker died"));
    assert_eq!(s.gcs.named_actor("ns", "phoenix"), None);
    assert!(matches!(register(&mut s, "third"), Message::Error { .. }));
}

fn workers(state: &mut State) -> Vec<WorkerEntry> {
    match reply(state, GetWorkers, Duration::ZERO) {
        Message::GcsReply(GcsReply::Workers(Workers { workers })) => workers,
        other => panic!("{other:?}"),
    }
}

#[test]
fn get_workers_lists_workers_and_drivers_of_running_jobs_on_live_nodes() {
    let mut s = state(Duration::from_secs(1));
    assert!(workers(&mut s).is_empty());
    let node = register(&mut s, Duration::ZERO);
    let (job, driver, _) = register_job(&mut s, [5; 32]);
    let worker = match reply(
        &mut s,
        RegisterWorker {
            job,
            node,
            address: "127.0.0.1:5000".into(),
        },
        Duration::ZERO,
    ) {
        Message::GcsReply(GcsReply::WorkerRegistered(WorkerRegistered { worker, .. })) => worker,
        other => panic!("{other:?}"),
    };
    let (finished, _, _) = register_job(&mut s, [6; 32]);
    reply(&mut s, FinishJob { job: finished }, Duration::ZERO);

    assert_eq!(
        workers(&mut s),
        vec![
            WorkerEntry {
                worker: driver,
                job,
                node: None,
                address: "127.0.0.1:4000".into(),
            },
            WorkerEntry {
                worker,
                job,
                node: Some(node),
                address: "127.0.0.1:5000".into(),
            },
        ]
    );

    // The node falls silent: its workers died with it, the driver did not.
    assert_eq!(s.gcs.check_health(Duration::from_secs(5)), vec![node]);
    let left: Vec<WorkerId> = workers(&mut s).iter().map(|w| w.worker).collect();
    assert_eq!(left, vec![driver]);
}

#[test]
fn subscribers_see_node_joins_and_deaths_in_order_and_unknown_subs_are_errors() {
    let mut s = state(Duration::from_secs(1));
    let sub = match reply(
        &mut s,
        Subscribe {
            channels: vec![WireChannel::Node],
        },
        Duration::ZERO,
    ) {
        Message::GcsReply(GcsReply::Subscribed(Subscribed { sub })) => sub,
        other => panic!("{other:?}"),
    };
    let node = register(&mut s, Duration::ZERO);
    let _ = s.gcs.check_health(Duration::from_secs(5));
    let poll = PollEvents { sub, wait_ms: 0 };
    match reply(&mut s, poll, Duration::from_secs(5)) {
        Message::GcsReply(GcsReply::Events(Events { events, dropped })) => {
            assert_eq!(dropped, 0);
            let states: Vec<(NodeId, bool)> = events
                .iter()
                .map(|e| match e {
                    WireEvent::Node(n) => (n.id, n.alive),
                    other => panic!("only node events were asked for: {other:?}"),
                })
                .collect();
            assert_eq!(states, vec![(node, true), (node, false)]);
        }
        other => panic!("{other:?}"),
    }
    // Taken once: the next poll is empty.
    assert!(matches!(
        reply(&mut s, poll, Duration::from_secs(5)),
        Message::GcsReply(GcsReply::Events(Events { events, .. })) if events.is_empty()
    ));
    s.unsubscribe(sub);
    assert!(matches!(
        reply(&mut s, PollEvents { sub, wait_ms: 0 }, Duration::ZERO),
        Message::Error { .. }
    ));
}
