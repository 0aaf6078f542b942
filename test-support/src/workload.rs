//! A synthetic workload shaped like the runtime's records (the schema table
//! of `ray_insight::views`, with ids as the runtime records them: task,
//! object and actor ids as `U128 { hi: owner worker, lo: sequence }`, node
//! and worker ids as `U64`): actors created over nodes and workers, function
//! tasks nested three levels deep, actor calls, object puts and gets,
//! context labels, `wait` spans and resource samples, with a bounded number
//! of tasks submitted or running at once. Every run feeds the same records.
//!
//! Shared by the memory test, the dashboard's scale tests and the dashboard
//! bench (each uses only part of it).

use ray_insight::{FieldValue, Fields, Record, RecordKind, Sink};

/// Function names by call depth: the driver calls `FUNCTIONS[..5]`, which
/// call `FUNCTIONS[5..15]`, which call `FUNCTIONS[15..]` (the runtime's names
/// are `module_path::function`).
pub const FUNCTIONS: [&str; 20] = [
    "pipeline::ingest::load_partition",
    "pipeline::ingest::load_manifest",
    "pipeline::train::train_epoch",
    "pipeline::eval::evaluate",
    "pipeline::export::checkpoint",
    "pipeline::ingest::decode_block",
    "pipeline::ingest::shuffle_block",
    "pipeline::ingest::tokenize",
    "pipeline::train::forward",
    "pipeline::train::backward",
    "pipeline::train::all_reduce",
    "pipeline::eval::score_batch",
    "pipeline::eval::merge_scores",
    "pipeline::export::serialize",
    "pipeline::export::upload_part",
    "pipeline::kernels::matmul",
    "pipeline::kernels::softmax",
    "pipeline::kernels::layer_norm",
    "pipeline::kernels::attention",
    "pipeline::kernels::compress",
];

/// Functions called by the driver: `FUNCTIONS[..LEVEL0]`.
pub const LEVEL0: usize = 5;
/// Functions called by those: `FUNCTIONS[LEVEL0..LEVEL1]`.
pub const LEVEL1: usize = 15;

/// Actor classes, and four methods of each (`CLASSES[c]` has
/// `METHODS[4 * c..4 * c + 4]`).
pub const CLASSES: [&str; 4] = [
    "pipeline::serve::ParameterShard",
    "pipeline::serve::ReplayBuffer",
    "pipeline::serve::Evaluator",
    "pipeline::serve::MetricsSink",
];
/// The methods of [`CLASSES`], four per class.
pub const METHODS: [&str; 16] = [
    "pipeline::serve::ParameterShard::pull",
    "pipeline::serve::ParameterShard::push",
    "pipeline::serve::ParameterShard::apply",
    "pipeline::serve::ParameterShard::version",
    "pipeline::serve::ReplayBuffer::add",
    "pipeline::serve::ReplayBuffer::sample",
    "pipeline::serve::ReplayBuffer::len",
    "pipeline::serve::ReplayBuffer::clear",
    "pipeline::serve::Evaluator::score",
    "pipeline::serve::Evaluator::reset",
    "pipeline::serve::Evaluator::report",
    "pipeline::serve::Evaluator::load",
    "pipeline::serve::MetricsSink::record",
    "pipeline::serve::MetricsSink::flush",
    "pipeline::serve::MetricsSink::snapshot",
    "pipeline::serve::MetricsSink::rotate",
];

/// The driver's worker id; workers are numbered after it.
pub const DRIVER_WORKER: u64 = 1;
/// The driver's node id.
pub const DRIVER_NODE: u64 = 1;
/// Pool threads per worker (each a Gantt lane).
pub const THREADS_PER_WORKER: u64 = 4;
/// Simulated time between two steps of the workload.
pub const STEP_NANOS: u64 = 1_000;
/// Records per batch handed to the sink (the layer's default batch size).
pub const BATCH: usize = 256;

/// The workload's size.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Tasks in all: function tasks and actor calls (two in five).
    pub tasks: u64,
    /// Actors, all created within the first tenth of the tasks.
    pub actors: u64,
    /// Nodes the workers are spread over.
    pub nodes: u64,
    /// Workers (each with its pool threads, and its share of the actors).
    pub workers: u64,
    /// Tasks submitted but not yet running at any time.
    pub queued: u64,
    /// Tasks running at any time.
    pub running: u64,
    /// Steps between two rounds of resource samples (one per worker).
    pub sample_every: u64,
}

/// The full-size workload of the memory bound and the dashboard bench:
/// 1,000,000 tasks over 10,000 actors, 8 nodes and 64 workers.
pub const FULL: Shape = Shape {
    tasks: 1_000_000,
    actors: 10_000,
    nodes: 8,
    workers: 64,
    queued: 200,
    running: 1_800,
    sample_every: 2_000,
};

/// splitmix64: a fixed, well-mixed choice per step, so every run feeds the
/// same records.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 128-bit id as the runtime records it: `hi` the owner worker, `lo` a
/// sequence number.
pub fn two_part(hi: u64, lo: u64) -> FieldValue {
    FieldValue::U128 { hi, lo }
}

/// A string field.
pub fn text(s: &str) -> FieldValue {
    FieldValue::Str(s.into())
}

/// What a task runs: a function, or a method of an actor (`None` only in
/// a slot no task has used yet).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Call {
    /// Nothing yet.
    #[default]
    None,
    /// `FUNCTIONS[i]`.
    Function(usize),
    /// A method of actor `actor`.
    Actor {
        /// The actor's index.
        actor: u64,
        /// Which of its class's four [`METHODS`].
        method: usize,
    },
}

/// A task that is running, as its children name it.
#[derive(Debug, Clone, Copy)]
pub struct Running {
    owner: u64,
    seq: u64,
    span: u64,
    thread: u32,
    worker: u64,
}

/// A task from its submit to its close.
#[derive(Debug, Clone, Copy, Default)]
pub struct Slot {
    call: Call,
    owner: u64,
    seq: u64,
    parent: Option<(u64, u64)>,
    worker: u64,
    thread: u32,
    span: u64,
    wait_span: u64,
}

/// An object put recently, for later gets and waits.
#[derive(Debug, Clone, Copy, Default)]
pub struct Put {
    owner: u64,
    seq: u64,
    bytes: u64,
    /// The task that put it.
    producer: (u64, u64),
}

/// The record generator: steps through the tasks, keeping only fixed-size
/// state (allocated before measuring starts).
pub struct Workload {
    shape: Shape,
    /// Tasks between their submit and their close, by task number.
    slots: Vec<Slot>,
    /// The latest task started at depth 0 and at depth 1.
    last_started: [Option<Running>; 2],
    puts: Vec<Put>,
    put_count: u64,
    actors_created: u64,
    next_span: u64,
    next_object: u64,
    /// The step of the next round of resource samples.
    next_sample: u64,
}

impl Workload {
    /// A generator at its first step.
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            slots: vec![Slot::default(); (shape.queued + shape.running + 1) as usize],
            last_started: [None, None],
            puts: vec![Put::default(); 64],
            put_count: 0,
            actors_created: 0,
            next_span: 0,
            next_object: 0,
            next_sample: 0,
        }
    }

    fn worker_id(worker: u64) -> u64 {
        DRIVER_WORKER + 1 + worker
    }

    fn node_id(&self, worker: u64) -> u64 {
        1 + worker % self.shape.nodes
    }

    fn actor_id(actor: u64) -> FieldValue {
        two_part(DRIVER_WORKER, (1 << 40) + actor)
    }

    fn actor_worker(&self, actor: u64) -> u64 {
        actor % self.shape.workers
    }

    fn actor_thread(&self, actor: u64) -> u32 {
        (1 + self.actor_worker(actor) * THREADS_PER_WORKER + actor % THREADS_PER_WORKER) as u32
    }

    /// A span id as the layer makes them: thread index in the high bits.
    fn new_span(&mut self, thread: u32) -> u64 {
        self.next_span += 1;
        (u64::from(thread) << 40) | self.next_span
    }

    fn slot(&mut self, task: u64) -> &mut Slot {
        let len = self.slots.len() as u64;
        &mut self.slots[(task % len) as usize]
    }

    /// One step: maybe resource samples and an actor creation, then task
    /// `i`'s submit, the start of the task submitted `queued` steps ago and
    /// the close of the one started `running` steps ago.
    pub fn step(&mut self, i: u64, out: &mut Vec<Record>) {
        let at = i * STEP_NANOS;
        if i >= self.next_sample {
            self.next_sample += self.shape.sample_every;
            self.samples(i, at, out);
        }
        // Every actor is created within the first tenth of the tasks.
        let create_every = (self.shape.tasks / 10 / self.shape.actors).max(1);
        if self.actors_created < self.shape.actors && i >= self.actors_created * create_every {
            self.create_actor(at, out);
        }
        self.submit(i, at + 1, out);
        if let Some(task) = i.checked_sub(self.shape.queued) {
            self.start(task, at + 2, out);
        }
        if let Some(task) = i.checked_sub(self.shape.queued + self.shape.running) {
            self.close(task, at + 3, out);
        }
        if i % 1_000 == 999 && self.put_count > 0 {
            // The driver reads a result.
            let put = self.puts[(self.put_count - 1) as usize % self.puts.len()];
            out.push(record(
                RecordKind::Event,
                0,
                0,
                "object.get",
                "ray::object",
                at + 4,
                0,
                fields([
                    ("object_id", Some(two_part(put.owner, put.seq))),
                    ("bytes", Some(FieldValue::U64(put.bytes))),
                    ("node_id", Some(FieldValue::U64(DRIVER_NODE))),
                ]),
            ));
        }
    }

    fn samples(&mut self, i: u64, at: u64, out: &mut Vec<Record>) {
        for worker in 0..self.shape.workers {
            let h = mix(i ^ (worker << 48));
            out.push(record(
                RecordKind::Event,
                0,
                0,
                "resource.sample",
                "ray::resource",
                at,
                (100_000 + worker) as u32,
                fields([
                    ("node_id", Some(FieldValue::U64(self.node_id(worker)))),
                    ("worker_id", Some(FieldValue::U64(Self::worker_id(worker)))),
                    ("pid", Some(FieldValue::U64(10_000 + worker))),
                    ("cpu_percent", Some(FieldValue::F64((h % 400) as f64))),
                    ("rss_bytes", Some(FieldValue::U64((1 << 30) + (h >> 40)))),
                    ("cpu_used", Some(FieldValue::F64((h % 5) as f64))),
                    ("cpu_total", Some(FieldValue::F64(4.0))),
                ]),
            ));
        }
    }

    fn create_actor(&mut self, at: u64, out: &mut Vec<Record>) {
        let actor = self.actors_created;
        self.actors_created += 1;
        let worker = self.actor_worker(actor);
        let thread = self.actor_thread(actor);
        let span = self.new_span(thread);
        out.push(record(
            RecordKind::SpanNew,
            span,
            0,
            "actor.create",
            "ray::actor",
            at,
            thread,
            fields([
                ("actor_id", Some(Self::actor_id(actor))),
                ("class", Some(text(CLASSES[actor as usize % CLASSES.len()]))),
                ("node_id", Some(FieldValue::U64(self.node_id(worker)))),
                ("worker_id", Some(FieldValue::U64(Self::worker_id(worker)))),
            ]),
        ));
        out.push(record(
            RecordKind::SpanClose,
            span,
            0,
            "actor.create",
            "ray::actor",
            at,
            thread,
            Fields::new(),
        ));
    }

    fn submit(&mut self, i: u64, at: u64, out: &mut Vec<Record>) {
        let h = mix(i);
        let (call, parent) = if i % 5 < 2 {
            let call = Call::Actor {
                actor: h % self.actors_created.max(1),
                method: ((h >> 32) % 4) as usize,
            };
            let parent = if (h >> 40) & 1 == 0 {
                None
            } else {
                self.last_started[0]
            };
            (call, parent)
        } else {
            let function = (h % FUNCTIONS.len() as u64) as usize;
            let parent = match function {
                f if f < LEVEL0 => None,
                f if f < LEVEL1 => self.last_started[0],
                _ => self.last_started[1],
            };
            (Call::Function(function), parent)
        };
        let (worker, thread) = match call {
            Call::Actor { actor, .. } => (self.actor_worker(actor), self.actor_thread(actor)),
            _ => {
                let worker = (h >> 16) % self.shape.workers;
                let thread = 1 + worker * THREADS_PER_WORKER + i % THREADS_PER_WORKER;
                (worker, thread as u32)
            }
        };
        let owner = parent.map_or(DRIVER_WORKER, |p| Self::worker_id(p.worker));
        *self.slot(i) = Slot {
            call,
            owner,
            seq: i,
            parent: parent.map(|p| (p.owner, p.seq)),
            worker,
            thread,
            span: 0,
            wait_span: 0,
        };
        let parent_task = parent.map(|p| two_part(p.owner, p.seq));
        let (span_parent, submit_thread) = parent.map_or((0, 0), |p| (p.span, p.thread));
        let submit_fields = match call {
            Call::Actor { actor, method } => fields([
                ("task_id", Some(two_part(owner, i))),
                ("method", Some(text(Self::method(actor, method)))),
                ("actor_id", Some(Self::actor_id(actor))),
                ("parent_task", parent_task),
            ]),
            Call::Function(function) => fields([
                ("task_id", Some(two_part(owner, i))),
                ("function", Some(text(FUNCTIONS[function]))),
                ("parent_task", parent_task),
            ]),
            Call::None => unreachable!("every submitted task has a call"),
        };
        out.push(record(
            RecordKind::Event,
            0,
            span_parent,
            "task.submit",
            "ray::task",
            at,
            submit_thread,
            submit_fields,
        ));
    }

    fn method(actor: u64, method: usize) -> &'static str {
        METHODS[(actor as usize % CLASSES.len()) * 4 + method]
    }

    fn start(&mut self, task: u64, at: u64, out: &mut Vec<Record>) {
        let slot = *self.slot(task);
        let span = self.new_span(slot.thread);
        self.slot(task).span = span;
        let task_id = two_part(slot.owner, slot.seq);
        let parent_task = slot.parent.map(|(hi, lo)| two_part(hi, lo));
        let node = self.node_id(slot.worker);
        let (name, target, run_fields) = match slot.call {
            Call::Function(function) => (
                "task.run",
                "ray::task",
                fields([
                    ("task_id", Some(task_id.clone())),
                    ("function", Some(text(FUNCTIONS[function]))),
                    ("attempt", Some(FieldValue::U64(0))),
                    ("parent_task", parent_task),
                    ("node_id", Some(FieldValue::U64(node))),
                    (
                        "worker_id",
                        Some(FieldValue::U64(Self::worker_id(slot.worker))),
                    ),
                ]),
            ),
            Call::Actor { actor, method } => (
                "actor.call",
                "ray::actor",
                fields([
                    ("task_id", Some(task_id.clone())),
                    ("actor_id", Some(Self::actor_id(actor))),
                    ("class", Some(text(CLASSES[actor as usize % CLASSES.len()]))),
                    ("method", Some(text(Self::method(actor, method)))),
                    ("parent_task", parent_task),
                    ("node_id", Some(FieldValue::U64(node))),
                    (
                        "worker_id",
                        Some(FieldValue::U64(Self::worker_id(slot.worker))),
                    ),
                ]),
            ),
            Call::None => unreachable!("every started task was submitted"),
        };
        out.push(record(
            RecordKind::SpanNew,
            span,
            0,
            name,
            target,
            at,
            slot.thread,
            run_fields,
        ));
        let running = Running {
            owner: slot.owner,
            seq: slot.seq,
            span,
            thread: slot.thread,
            worker: slot.worker,
        };
        let event = |name, pairs: [(&'static str, Option<FieldValue>); 4]| {
            record(
                RecordKind::Event,
                0,
                span,
                name,
                "ray::object",
                at,
                slot.thread,
                fields(pairs),
            )
        };
        let h = mix(task ^ 0x5eed);
        // A third of the tasks read a recent object.
        if task % 3 == 1 && self.put_count > 0 {
            let back = h % self.put_count.min(self.puts.len() as u64);
            let put = self.puts[((self.put_count - 1 - back) % self.puts.len() as u64) as usize];
            out.push(event(
                "object.get",
                [
                    ("object_id", Some(two_part(put.owner, put.seq))),
                    ("bytes", Some(FieldValue::U64(put.bytes))),
                    ("task_id", Some(task_id.clone())),
                    ("node_id", Some(FieldValue::U64(node))),
                ],
            ));
        }
        match slot.call {
            Call::Function(function) if function < LEVEL0 => {
                // Depth-0 tasks label themselves (their children inherit it)
                // and wait for two recent results.
                self.last_started[0] = Some(running);
                let rank = format!("dp_rank={}", task % 8);
                out.push(record(
                    RecordKind::Event,
                    0,
                    span,
                    "context",
                    "ray::insight",
                    at,
                    slot.thread,
                    fields([
                        ("task_id", Some(task_id.clone())),
                        ("labels", Some(text(&rank))),
                    ]),
                ));
                if self.put_count >= 2 {
                    self.wait(task, &task_id, span, slot.thread, at, out);
                }
            }
            _ => {
                if matches!(slot.call, Call::Function(f) if f < LEVEL1) {
                    self.last_started[1] = Some(running);
                }
                self.next_object += 1;
                let put = Put {
                    owner: Self::worker_id(slot.worker),
                    seq: (1 << 41) + self.next_object,
                    bytes: 1_024 + h % 65_536,
                    producer: (slot.owner, slot.seq),
                };
                let len = self.puts.len() as u64;
                self.puts[(self.put_count % len) as usize] = put;
                self.put_count += 1;
                out.push(event(
                    "object.put",
                    [
                        ("object_id", Some(two_part(put.owner, put.seq))),
                        ("bytes", Some(FieldValue::U64(put.bytes))),
                        ("task_id", Some(task_id)),
                        ("node_id", Some(FieldValue::U64(node))),
                    ],
                ));
            }
        }
    }

    /// A `wait` span on the two latest puts, open until the task closes.
    fn wait(
        &mut self,
        task: u64,
        task_id: &FieldValue,
        parent: u64,
        thread: u32,
        at: u64,
        out: &mut Vec<Record>,
    ) {
        let len = self.puts.len() as u64;
        let latest = [
            self.puts[((self.put_count - 1) % len) as usize],
            self.puts[((self.put_count - 2) % len) as usize],
        ];
        let objects = latest
            .iter()
            .map(|p| format!("obj-{:x}.{:x}", p.owner, p.seq))
            .collect::<Vec<_>>()
            .join(",");
        let producers = latest
            .iter()
            .map(|p| format!("task-{:x}.{:x}", p.producer.0, p.producer.1))
            .collect::<Vec<_>>()
            .join(",");
        let span = self.new_span(thread);
        self.slot(task).wait_span = span;
        let wait = record(
            RecordKind::SpanNew,
            span,
            parent,
            "wait",
            "ray::wait",
            at,
            thread,
            fields([
                ("task_id", Some(task_id.clone())),
                ("objects", Some(text(&objects))),
                ("producers", Some(text(&producers))),
            ]),
        );
        out.push(wait);
    }

    fn close(&mut self, task: u64, at: u64, out: &mut Vec<Record>) {
        let slot = *self.slot(task);
        if slot.wait_span != 0 {
            out.push(record(
                RecordKind::SpanClose,
                slot.wait_span,
                slot.span,
                "wait",
                "ray::wait",
                at,
                slot.thread,
                Fields::new(),
            ));
        }
        let (name, target) = match slot.call {
            Call::Actor { .. } => ("actor.call", "ray::actor"),
            _ => ("task.run", "ray::task"),
        };
        out.push(record(
            RecordKind::SpanClose,
            slot.span,
            0,
            name,
            target,
            at,
            slot.thread,
            Fields::new(),
        ));
    }
}

/// The fields that are present, in order (the runtime leaves out a `None`).
pub fn fields<const N: usize>(fields: [(&'static str, Option<FieldValue>); N]) -> Fields {
    fields
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect()
}

/// One record, as the runtime's layer would make it.
#[allow(clippy::too_many_arguments)]
pub fn record(
    kind: RecordKind,
    span: u64,
    parent: u64,
    name: &'static str,
    target: &'static str,
    at_nanos: u64,
    thread: u32,
    fields: Fields,
) -> Record {
    Record {
        kind,
        span,
        parent,
        name,
        target,
        at_nanos,
        thread,
        fields,
    }
}

/// Feeds all of `shape`'s records into `sink` in batches of [`BATCH`], as
/// the collector delivers them; returns how many records there were.
pub fn feed_all(shape: Shape, sink: &mut impl Sink) -> u64 {
    let mut workload = Workload::new(shape);
    let mut batch: Vec<Record> = Vec::with_capacity(4 * BATCH);
    let mut records = 0;
    for i in 0..shape.tasks {
        workload.step(i, &mut batch);
        if batch.len() >= BATCH || i + 1 == shape.tasks {
            records += batch.len() as u64;
            sink.accept(&batch);
            batch.clear();
        }
    }
    records
}
