#!/usr/bin/env python3
"""W1-W7 of WORKLOADS.md in Ray, shaped exactly as ray-rs's harness.

    python benches/ray/workloads.py [--cpus N] [W1 .. W7]

The Ray side of the side-by-side benchmark (see README.md beside this
file). Every workload has the counts, sizes and structure of
examples/workloads.rs and examples/shapes/*.rs, and prints one JSON line
with the same keys as that harness: `workload`, `mode` (here "ray"),
`cpus`, `runs`, the headline figure's name (`figure`), `median`, `min`,
`max` and `unit`, every figure under `figures`, and counts that are not
measurements under `info`.

Each workload runs 3 times on one fresh `ray.init(num_cpus=N)` (default
N = 2), after the warm-up that ray-rs's cluster mode does: 16 no-op probe
tasks that each hold their worker for 20 ms, so the worker processes that
tasks run in exist before run 1 (time under `info.worker_warm_up_s`).
The dashboard is not started: it is a monitoring UI, not part of the
runtime, and ray-rs runs none.

Zero-copy reads (ray-rs's `get_archived` and `ArchivedRef` arguments) are
done the way Ray offers them without numpy: the bytes are put wrapped in a
`pickle.PickleBuffer`, so they are stored out of band and `ray.get` (or a
task's argument) is a read-only buffer over the stored bytes, not a copy.
Plain `bytes` are deserialized into a copy, like ray-rs's `get`.

Each Ray actor is a process of tens of MB: where the memory the 50-actor
step of W5 took says the 1,000-actor step cannot fit, that step is left out
and said so (`info.not_run`, and on stderr) instead of exhausting memory.
A workload that fails is reported on stderr; the others still run, and the
exit status is then 1.
"""

import argparse
import json
import math
import os
import pickle
import sys
import time

# Ray reports usage statistics over the network unless told not to.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402  (after the environment above is set)

# Runs per workload; the figures are their median, min and max.
RUNS = 3
# The workloads, in order.
WORKLOADS = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"]
# A run slower than this (seconds) is reported on stderr.
SLOW_RUN = 60.0

# Shapes, as in examples/shapes/micro.rs and examples/workloads.rs.
W1_TASKS = 20_000
W2_ROUND_TRIPS = 2_000
W3_CALLS = 20_000
W3_ROUND_TRIPS = 2_000
W4_SIZES = [("1KiB", 1 << 10), ("1MiB", 1 << 20), ("100MiB", 100 << 20)]
W4_REPS = [10_000, 200, 5]
W4_ARCHIVED_GETS = 1_000
W5_ACTORS = [50, 1_000]
W5_MEMORY_STEP = 1_000
# The least RSS a Ray actor's worker process is taken to need (bytes).
MIN_RSS_PER_ACTOR = 50e6
# As in examples/shapes/big_arg.rs.
W6_TASKS = 200
W6_BYTES = 10 << 20
# As in examples/shapes/tree.rs.
TREE_DEPTH = 3
TREE_CALLS_PER_CHILD = 10
TREE_LEAF_SLEEP_S = 0.005
TREE_DEFAULT_SEED = 42
# The warm-up, as ray-rs's `nodes_reached` (examples/shapes/cluster.rs).
WARM_UP_PROBES = 16
WARM_UP_HOLD_S = 0.020

MASK64 = (1 << 64) - 1


class SplitMix64:
    """SplitMix64, as examples/shapes/splitmix.rs: a seed fixes the tree."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


# ---------------------------------------------------------------- remote code


@ray.remote
def noop():
    """The no-op task of W1 and W2."""


@ray.remote
def probe():
    """A warm-up probe: holds its worker so the probes spread over workers."""
    time.sleep(WARM_UP_HOLD_S)


@ray.remote
def byte_len(data):
    """W6: the length of the argument (a buffer view or a bytes copy)."""
    return len(data)


@ray.remote
class NoopActor:
    """The actor with a no-op method of W3 and W5."""

    def noop(self):
        pass


@ray.remote
class TreeNode:
    """One actor of the W7 worker tree (examples/shapes/tree.rs)."""

    def __init__(self, depth, seed):
        self.children = []
        if depth < TREE_DEPTH:
            rng = SplitMix64(seed)
            for _ in range(1 + rng.next_u64() % 2):
                self.children.append(TreeNode.remote(depth + 1, rng.next_u64()))

    def process(self):
        """Runs this subtree once; returns the process() calls it made,
        this one included."""
        if not self.children:
            time.sleep(TREE_LEAF_SLEEP_S)
            return 1
        refs = [
            child.process.remote()
            for child in self.children
            for _ in range(TREE_CALLS_PER_CHILD)
        ]
        return 1 + sum(ray.get(refs))

    def actors(self):
        """The number of actors in this subtree, this one included."""
        return 1 + sum(ray.get([c.actors.remote() for c in self.children]))


# ---------------------------------------------------------------- measuring


def percentile(sorted_values, p):
    """The nearest-rank p-th percentile of sorted, non-empty values."""
    rank = math.ceil(p / 100 * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


class Run:
    """What one run produced: figures (the first is the headline) and info."""

    def __init__(self):
        self.figures = []  # (name, unit, value)
        self.info = {}

    def figure(self, name, unit, value):
        self.figures.append((name, unit, value))

    def latency_figures(self, prefix, sorted_us):
        """p50 and p99 of sorted latencies in µs, as `{prefix}p50/p99`."""
        self.figure(f"{prefix}p50", "us", percentile(sorted_us, 50))
        self.figure(f"{prefix}p99", "us", percentile(sorted_us, 99))


def latencies_us(n, op):
    """Times n sequential calls of op; returns their latencies in µs, sorted."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        op()
        out.append((time.perf_counter() - start) * 1e6)
    out.sort()
    return out


def payload(length):
    """The byte pattern of micro::payload: byte i is i % 251."""
    pattern = bytes(range(251))
    return (pattern * (length // 251 + 1))[:length]


def rss_bytes(pid):
    """Resident set size of process pid, from /proc/PID/statm."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tree_rss_bytes():
    """RSS of this process and all its descendants (Ray's raylet, GCS and
    worker processes are started under the driver by ray.init)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended while we looked
        # `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    me = os.getpid()
    total = rss_bytes(me)
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        try:
            total += rss_bytes(pid)
        except OSError:
            pass  # ended while we looked: counts as 0
        stack.extend(children.get(pid, []))
    return total


# ---------------------------------------------------------------- workloads


def w1():
    start = time.perf_counter()
    got = len(ray.get([noop.remote() for _ in range(W1_TASKS)]))
    elapsed = time.perf_counter() - start
    assert got == W1_TASKS, f"{got} of {W1_TASKS} results"
    run = Run()
    run.figure("throughput", "tasks/s", W1_TASKS / elapsed)
    run.info["tasks"] = W1_TASKS
    return run


def w2():
    lat = latencies_us(W2_ROUND_TRIPS, lambda: ray.get(noop.remote()))
    run = Run()
    run.latency_figures("", lat)
    run.info["round_trips"] = W2_ROUND_TRIPS
    return run


def w3():
    actor = NoopActor.remote()
    ray.get(actor.noop.remote())  # the actor is up before timing
    start = time.perf_counter()
    got = len(ray.get([actor.noop.remote() for _ in range(W3_CALLS)]))
    elapsed = time.perf_counter() - start
    assert got == W3_CALLS, f"{got} of {W3_CALLS} results"
    run = Run()
    run.figure("throughput", "calls/s", W3_CALLS / elapsed)
    lat = latencies_us(W3_ROUND_TRIPS, lambda: ray.get(actor.noop.remote()))
    run.latency_figures("round_trip_", lat)
    run.info["calls"] = W3_CALLS
    run.info["round_trips"] = W3_ROUND_TRIPS
    return run


def rate(length, reps, elapsed):
    """ops/s for small buffers, GB/s (10^9 bytes) of payload for large ones."""
    if length < 1 << 20:
        return "ops/s", reps / elapsed
    return "GB/s", length * reps / elapsed / 1e9


def time_put_get(data, reps, wrap):
    """Total seconds of `reps` put+get round trips of `wrap(data)`, each
    checked for length. (ray-rs copies the buffer before each untimed,
    because its put takes ownership; Ray's put leaves `data` as it is.)"""
    total = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        got = ray.get(ray.put(wrap(data)))
        total += time.perf_counter() - start
        assert len(got) == len(data), f"got {len(got)} bytes back, put {len(data)}"
    return total


def w4():
    run = Run()
    for (label, length), reps in zip(W4_SIZES, W4_REPS):
        data = payload(length)
        # get: a deserialized copy (plain bytes).
        unit, value = rate(length, reps, time_put_get(data, reps, bytes))
        run.figure(f"put_get_{label}", unit, value)
        # get_archived: a read-only view of the stored bytes.
        unit, value = rate(length, reps, time_put_get(data, reps, pickle.PickleBuffer))
        run.figure(f"put_get_archived_{label}", unit, value)

        ref = ray.put(pickle.PickleBuffer(data))
        start = time.perf_counter()
        for _ in range(W4_ARCHIVED_GETS):
            view = ray.get(ref)
            assert len(view) == length, f"archived view has {len(view)} bytes"
        ns = (time.perf_counter() - start) * 1e9 / W4_ARCHIVED_GETS
        run.figure(f"get_archived_{label}", "ns/op", ns)
        del ref, view
    run.info["reps"] = W4_REPS
    run.info["archived_gets"] = W4_ARCHIVED_GETS
    return run


def mem_available_bytes():
    """MemAvailable of /proc/meminfo."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def w5():
    run = Run()
    rss_per_actor = 0.0  # RSS growth per actor of the step before
    for n in W5_ACTORS:
        # Each Ray actor is a process of tens of MB: where the step before
        # says this one cannot fit in memory, it is left out (and said so)
        # rather than run the machine out of memory. The size never shrinks.
        # A Ray worker process is tens of MB; a growth measured lower (the
        # pool's prestarted workers hide it) must not let the next step run.
        need = max(rss_per_actor, MIN_RSS_PER_ACTOR) * n
        available = mem_available_bytes()
        if need > available:
            note = (f"create_and_call_{n}: needs about {need / 1e9:.0f} GB "
                    f"(at least {MIN_RSS_PER_ACTOR / 1e6:.0f} MB per actor "
                    f"process; the step before grew "
                    f"{rss_per_actor / 1e6:.0f} MB per actor), "
                    f"{available / 1e9:.0f} GB available")
            run.info["not_run"] = note
            print(f"note: W5 in Ray: not run: {note}", file=sys.stderr)
            break
        rss_before = tree_rss_bytes()
        start = time.perf_counter()
        actors = [NoopActor.remote() for _ in range(n)]
        ray.get([a.noop.remote() for a in actors])
        run.figure(f"create_and_call_{n}", "s", time.perf_counter() - start)
        rss_per_actor = max(tree_rss_bytes() - rss_before, 0) / n
        if n == W5_MEMORY_STEP:
            run.figure(f"rss_per_actor_{n}", "bytes (estimate)", rss_per_actor)
        del actors  # Ray ends an actor when its last handle goes
    run.info["memory_note"] = (
        "estimate: RSS growth (/proc/PID/statm of this process and its "
        "descendants: the raylet and every worker process) while 1,000 actors "
        "are created and alive, divided by 1,000; each Ray actor is a process "
        "and shared pages count once per process"
    )
    return run


def w6():
    data = payload(W6_BYTES)
    view = ray.put(pickle.PickleBuffer(data))  # tasks get a read-only view
    copy = ray.put(data)  # tasks get a deserialized bytes copy
    run = Run()
    run.figure("throughput", "tasks/s", w6_pass(view))
    run.figure("throughput_deserialized", "tasks/s", w6_pass(copy))
    run.info["tasks"] = W6_TASKS
    run.info["arg_bytes"] = W6_BYTES
    return run


def w6_pass(ref):
    """One W6 batch, checked; returns tasks/s."""
    start = time.perf_counter()
    lens = ray.get([byte_len.remote(ref) for _ in range(W6_TASKS)])
    elapsed = time.perf_counter() - start
    assert len(lens) == W6_TASKS and all(n == W6_BYTES for n in lens), \
        "a task saw the wrong length"
    return W6_TASKS / elapsed


def w7():
    start = time.perf_counter()
    root = TreeNode.remote(0, TREE_DEFAULT_SEED)
    calls = ray.get(root.process.remote())
    seconds = time.perf_counter() - start
    actors = ray.get(root.actors.remote())
    run = Run()
    run.figure("end_to_end", "s", seconds)
    run.info["seed"] = TREE_DEFAULT_SEED
    run.info["depth"] = TREE_DEPTH
    run.info["actors"] = actors
    run.info["calls"] = calls
    return run


RUNNERS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6, "W7": w7}


# ---------------------------------------------------------------- the harness


def run_workload(workload, cpus):
    """Runs `workload` RUNS times on one fresh Ray; returns its JSON line."""
    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False)
    runtime_start_s = time.perf_counter() - start
    warm = time.perf_counter()
    ray.get([probe.remote() for _ in range(WARM_UP_PROBES)])
    worker_warm_up_s = time.perf_counter() - warm

    order, samples, info = [], {}, {}
    try:
        for i in range(1, RUNS + 1):
            started = time.perf_counter()
            run = RUNNERS[workload]()
            took = time.perf_counter() - started
            if took > SLOW_RUN:
                print(f"note: {workload} run {i} in Ray took {took:.1f} s "
                      f"(over {SLOW_RUN:.0f} s); its size is as WORKLOADS.md "
                      "defines, unchanged", file=sys.stderr)
            for name, unit, value in run.figures:
                if name not in samples:
                    order.append(name)
                    samples[name] = (unit, [])
                samples[name][1].append(value)
            info = run.info  # the last run's counts
    finally:
        ray.shutdown()
    info["runtime_start_s"] = runtime_start_s
    info["worker_warm_up_s"] = worker_warm_up_s
    info["ray_version"] = ray.__version__

    figures = {}
    for name in order:
        unit, values = samples[name]
        values = sorted(values)
        figures[name] = {"median": percentile(values, 50), "min": values[0],
                         "max": values[-1], "unit": unit}
    headline = order[0]
    line = {"workload": workload, "mode": "ray", "cpus": cpus, "runs": RUNS,
            "figure": headline}
    line.update(figures[headline])
    line["figures"] = figures
    line["info"] = info
    return line


def main():
    parser = argparse.ArgumentParser(
        description="W1-W7 of WORKLOADS.md in Ray, one JSON line each.")
    parser.add_argument("--cpus", type=int, default=2,
                        help="CPUs given to ray.init (default 2)")
    parser.add_argument("workloads", nargs="*", metavar="ID",
                        help="W1 .. W7 (default: all)")
    args = parser.parse_args()
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {WORKLOADS}")
    failed = []
    for workload in args.workloads or WORKLOADS:
        # One workload failing leaves the others' lines standing.
        try:
            print(json.dumps(run_workload(workload, args.cpus)), flush=True)
        except Exception as e:  # noqa: BLE001  (reported, then exit 1)
            print(f"error: {workload} in Ray: {e!r}", file=sys.stderr)
            failed.append(workload)
    if failed:
        sys.exit(f"failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
