//! The resource sampler: a thread that emits, every period, one
//! `resource.sample` event with what this process uses (CPU %, resident
//! memory, the machine's GPUs) and what its runtime's admitted work holds
//! against the node's capacity (CPU, GPU, memory).
//!
//! Started by [`crate::insight::sample_resources`]; one sampler per runtime
//! at most. The thread holds the runtime weakly and stops within a period of
//! its shutdown (or drop), or at once when the last guard is dropped; it is a
//! plain std thread, so it never keeps the process alive. It never waits on
//! `nvidia-smi`: a GPU reading runs beside it and is polled each period.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use ray_insight::resources::{GpuPoll, GpuSample, GpuSampler, ProcessSample, ProcessSampler};
use ray_sched::{CPU, GPU, MEMORY};

use crate::runtime::Runtime;

/// The shortest period a sampler runs at (a zero period would spin).
pub(crate) const MIN_PERIOD: Duration = Duration::from_millis(10);

/// GPUs are read at most this often: each reading starts `nvidia-smi`
/// (which runs while the thread goes on sampling; its reading goes with the
/// first sample after it ends).
const GPU_PERIOD: Duration = Duration::from_secs(1);

/// Runtimes with a sampler, so a second request shares the first.
static ACTIVE: Mutex<Vec<(Weak<Runtime>, Weak<Sampling>)>> = Mutex::new(Vec::new());

/// A running sampler; dropping the last `Arc` stops its thread and waits
/// for it (at most one reading of `/proc`; a GPU run in flight is killed).
pub(crate) struct Sampling {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
    period: Duration,
}

impl Sampling {
    /// The period samples are taken at.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// Whether the thread still runs (it ends when the runtime shuts down).
    pub(crate) fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.signal.stop();
        if let Some(thread) = self.thread.take() {
            // The runtime keeps a guard when it records; if its last handle
            // goes while the sampler thread briefly holds it, the guard drops
            // on that thread: it then just ends, no self-join.
            if thread.thread().id() != std::thread::current().id() {
                // A panic in it has already been reported; nothing to add here.
                let _ = thread.join();
            }
        }
    }
}

/// Stop flag of a sampler thread, and its wake-up.
#[derive(Default)]
struct Signal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Signal {
    fn stop(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }

    fn is_stopped(&self) -> bool {
        *self.stopped.lock()
    }

    /// Sleeps for `period` unless stopped first; returns whether stopped.
    fn sleep(&self, period: Duration) -> bool {
        let deadline = Instant::now() + period;
        let mut stopped = self.stopped.lock();
        while !*stopped {
            if self.wake.wait_until(&mut stopped, deadline).timed_out() {
                break;
            }
        }
        *stopped
    }
}

/// Starts sampling `rt` every `period` (at least [`MIN_PERIOD`]), or joins
/// the sampler already running for it (whose period then stands).
///
/// `None` if the runtime is shut down or the thread could not be started.
pub(crate) fn start(rt: &Arc<Runtime>, period: Duration) -> Option<Arc<Sampling>> {
    let mut active = ACTIVE.lock();
    active.retain(|(r, s)| r.strong_count() > 0 && s.strong_count() > 0);
    let existing = active
        .iter()
        .filter(|(r, _)| std::ptr::eq(r.as_ptr(), Arc::as_ptr(rt)))
        .find_map(|(_, s)| s.upgrade());
    if let Some(sampling) = existing {
        return Some(sampling);
    }
    if rt.is_shut_down() {
        return None;
    }
    let period = period.max(MIN_PERIOD);
    let signal = Arc::new(Signal::default());
    let spawned = std::thread::Builder::new()
        .name("rayrs-sampler".into())
        .spawn({
            let rt = Arc::downgrade(rt);
            let signal = signal.clone();
            move || run(&rt, &signal, period)
        });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => {
            tracing::warn!(target: "ray::resource", error = %e, "resource sampler thread not started");
            return None;
        }
    };
    let sampling = Arc::new(Sampling {
        signal,
        thread: Some(thread),
        period,
    });
    active.push((Arc::downgrade(rt), Arc::downgrade(&sampling)));
    Some(sampling)
}

/// What the runtime's admission holds and has, read under its lock.
struct Admitted {
    node: u64,
    worker: u64,
    cpu: (f64, f64),
    gpu: (f64, f64),
    memory: (f64, f64),
}

/// Reads `(used, total)` per resource; `None` once the runtime is gone or
/// shut down.
fn admitted(rt: &Weak<Runtime>) -> Option<Admitted> {
    let rt = rt.upgrade()?;
    if rt.is_shut_down() {
        return None;
    }
    let (cpu, gpu, memory) = {
        let sched = rt.sched.lock();
        let used = sched.resources().used();
        (used.get(CPU), used.get(GPU), used.get(MEMORY))
    };
    let total = &rt.node_total;
    Some(Admitted {
        node: rt.node.0,
        worker: rt.worker.0,
        cpu: (cpu.to_f64(), total.get(CPU).to_f64()),
        gpu: (gpu.to_f64(), total.get(GPU).to_f64()),
        memory: (memory.to_f64(), total.get(MEMORY).to_f64()),
    })
}

/// The sampler thread: sleep a period, read, emit; until stopped or the
/// runtime is gone.
fn run(rt: &Weak<Runtime>, signal: &Signal, period: Duration) {
    let mut process = ProcessSampler::new();
    if let Some(p) = process.as_mut() {
        // The base reading: the first sample then has a CPU rate.
        let _ = p.sample();
    }
    let mut gpus = GpuSampler::detect();
    let mut next_gpu = Instant::now();
    let pid = u64::from(std::process::id());
    while !signal.sleep(period) {
        let Some(admitted) = admitted(rt) else {
            break;
        };
        let usage = process.as_mut().and_then(ProcessSampler::sample);
        let mut gpu = None;
        if let Some(sampler) = gpus.as_mut() {
            if let GpuPoll::Ready(reading) = sampler.poll() {
                gpu = Some(reading);
            }
            let now = Instant::now();
            if !sampler.is_running() && now >= next_gpu {
                sampler.start();
                next_gpu = now + period.max(GPU_PERIOD);
            }
            if sampler.is_disabled() {
                gpus = None;
            }
        }
        // A stop that came while reading wins: no sample after the guard
        // has gone.
        if signal.is_stopped() {
            break;
        }
        emit(pid, &admitted, usage, gpu.as_ref());
        // The sampler thread records one event per period: hand it to the
        // insight collector now rather than when a batch fills.
        ray_insight::InsightLayer::flush_current_thread();
    }
}

fn emit(pid: u64, a: &Admitted, usage: Option<ProcessSample>, gpu: Option<&GpuSample>) {
    // GPU and memory requests only where the node has some.
    let (gpu_used, gpu_total) = a.gpu;
    let (memory_used, memory_total) = a.memory;
    let has_gpu = gpu_total > 0.0;
    let has_memory = memory_total > 0.0;
    tracing::trace!(
        name: "resource.sample",
        target: "ray::resource",
        node_id = a.node,
        worker_id = a.worker,
        pid,
        cpu_percent = usage.and_then(|u| u.cpu_percent),
        rss_bytes = usage.map(|u| u.rss_bytes),
        cpu_used = a.cpu.0,
        cpu_total = a.cpu.1,
        gpu_used = has_gpu.then_some(gpu_used),
        gpu_total = has_gpu.then_some(gpu_total),
        memory_used = has_memory.then_some(memory_used),
        memory_total = has_memory.then_some(memory_total),
        gpu_count = gpu.map(|g| g.count() as u64),
        gpu_util_percent = gpu.and_then(GpuSample::utilization_percent),
        gpu_mem_used_bytes = gpu.and_then(GpuSample::memory_used_bytes),
        gpu_mem_total_bytes = gpu.and_then(GpuSample::memory_total_bytes),
    );
}
