#!/usr/bin/env bash
# Ray beside ray-rs: runs W1–W7 (WORKLOADS.md) in Ray and in ray-rs
# (embedded and cluster mode) on this machine and prints one table.
#
#   bash benches/ray/run.sh [--cpus N] [--pin] [--ray-from DIR] [ID ...]
#
#   --cpus N  CPUs given to Ray (ray.init(num_cpus=N)) and to ray-rs
#             (--cpus N: the embedded runtime, or the cluster's node); default 2
#   --pin     run everything under `taskset -c 0,1` (machines with >2 cores)
#   --ray-from DIR  reuse the Ray figures of an earlier run (DIR/ray.jsonl,
#             e.g. target/ray-compare/<date-time>) instead of running Ray:
#             ray-rs is rerun, no venv or network is needed, and about.txt
#             says where the Ray column came from
#   ID ...    workloads to run, W1 .. W7 (default: all); the same for all three
#
# The venv is $RAY_VENV (default target/ray-venv), created if missing; ray is
# installed or upgraded to the current release each time. Raw JSON lines and
# the table go to target/ray-compare/<date-time>/. Not part of CI: it needs
# network for pip and takes many minutes (see README.md).
set -euo pipefail

cd "$(dirname "$0")/../.."

cpus=2
pin=()
ids=()
ray_from=""
while (($#)); do
    case "$1" in
        --cpus) cpus="${2:?--cpus needs a number}"; shift 2 ;;
        --pin) pin=(taskset -c 0,1); shift ;;
        --ray-from) ray_from="${2:?--ray-from needs a directory}"; shift 2 ;;
        W[1-7]) ids+=("$1"); shift ;;
        *) echo "usage: $0 [--cpus N] [--pin] [--ray-from DIR] [W1 .. W7]" >&2; exit 2 ;;
    esac
done
# ray-rs's cluster mode, given no ids, also runs extras that Ray has no
# counterpart for: name W1..W7 explicitly.
((${#ids[@]})) || ids=(W1 W2 W3 W4 W5 W6 W7)

cores=$(nproc)
if ((${#pin[@]})) && ((cores <= 2)); then
    echo "note: --pin ignored: this machine has only $cores cores" >&2
    pin=()
fi

if [[ -n "$ray_from" ]]; then
    [[ -f "$ray_from/ray.jsonl" ]] || { echo "error: no $ray_from/ray.jsonl" >&2; exit 2; }
    python=python3
    ray_version="from $ray_from ($(grep -o 'ray [0-9.]*' "$ray_from/about.txt" 2>/dev/null || echo 'version unknown'))"
else
    venv="${RAY_VENV:-target/ray-venv}"
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip ray
    python="$venv/bin/python"
    ray_version=$("$python" -c 'import ray; print(ray.__version__)')
fi

cargo build --release --example workloads
workloads_bin="${CARGO_TARGET_DIR:-target}/release/examples/workloads"

out="target/ray-compare/$(date +%Y-%m-%dT%H%M%S)"
mkdir -p "$out"
echo "date: $(date -Iseconds); nproc: $cores; cpus given: $cpus;" \
     "pinned: ${pin[*]:-no}; ray $ray_version; results: $out" | tee "$out/about.txt"

# Runs one harness, its JSON lines to $out/$1.jsonl (and the terminal). A
# harness that fails is reported and the others still run.
failed=()
run() {
    local name=$1
    shift
    echo "== $name: $*" >&2
    if ! "${pin[@]}" "$@" | tee "$out/$name.jsonl"; then
        echo "error: $name failed (its lines so far are kept)" >&2
        failed+=("$name")
    fi
}
if [[ -n "$ray_from" ]]; then
    cp "$ray_from/ray.jsonl" "$out/ray.jsonl"
else
    run ray "$python" benches/ray/workloads.py --cpus "$cpus" "${ids[@]}"
fi
run embedded "$workloads_bin" --mode embedded --cpus "$cpus" "${ids[@]}"
run cluster "$workloads_bin" --mode cluster --cpus "$cpus" "${ids[@]}"

{
    echo
    cat "$out/about.txt"
    echo
    "$python" benches/ray/table.py "$out/ray.jsonl" "$out/embedded.jsonl" "$out/cluster.jsonl"
} | tee "$out/table.md"

if ((${#failed[@]})); then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
