#!/usr/bin/env bash
# A two-node cluster with real processes, as a user runs it: start a head
# with rayrs, join a second node, run the W7 example (worker_tree) against
# the cluster, check `rayrs status` and `rayrs list jobs`, stop everything
# with `rayrs stop`, and check that no process of this run is left.
#
# Every process of the run names the run's temp directory on its command
# line (rayrs by --dir, worker processes by the node's binary cache
# <dir>/binaries/<hash>), which is how leftovers are found; the EXIT trap
# kills them by pid on any exit path. The commands match README.md's
# "Run a cluster" section.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

T0=${EPOCHREALTIME:-$SECONDS}
RUN=""
HEAD_PID=""
NODE_PID=""
DRIVER_PID=""

# Seconds since the script started, to one decimal.
elapsed() {
    awk -v a="$T0" -v b="${EPOCHREALTIME:-$SECONDS}" 'BEGIN { printf "%.1f", b - a }'
}

step() {
    echo "== cluster [$(elapsed) s]: $*"
}

fail() {
    echo "cluster.sh: FAILED [$(elapsed) s]: $*" >&2
    exit 1
}

# Pids of live processes whose command line names this run's directory.
run_pids() {
    [[ -n $RUN ]] || return 0
    pgrep -f -- "$RUN/" || true
}

# Whether PID is a running process: an exited child of ours stays a zombie
# until waited for, and `kill -0` still succeeds on it.
is_live() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != [ZX] ]]
}

# Whether any of the given pids is a running process.
any_alive() {
    local pid
    for pid in "$@"; do
        is_live "$pid" && return 0
    done
    return 1
}

cleanup() {
    local rc=$?
    trap - EXIT ERR
    set +e
    if ((rc != 0)) && [[ -n $RUN ]]; then
        for log in head.log node.log driver.log status.txt jobs.txt insight.txt; do
            [[ -s $RUN/$log ]] || continue
            # The first lines hold the error, the last where it ended.
            local lines
            lines=$(wc -l <"$RUN/$log")
            echo "--- $log ($lines lines)" >&2
            if ((lines <= 60)); then
                cat "$RUN/$log" >&2
            else
                head -n 30 "$RUN/$log" >&2
                echo "[... $((lines - 60)) lines ...]" >&2
                tail -n 30 "$RUN/$log" >&2
            fi
        done
    fi
    local pids
    pids=$(
        for pid in $DRIVER_PID $HEAD_PID $NODE_PID $(run_pids); do
            is_live "$pid" && echo "$pid"
        done | sort -un
    )
    if [[ -n $pids ]]; then
        echo "cluster.sh: killing leftover processes:" $pids >&2
        # shellcheck disable=SC2086 # one pid per word
        kill -TERM $pids 2>/dev/null
        for _ in $(seq 50); do
            any_alive $pids || break
            sleep 0.1
        done
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
    fi
    [[ -n $HEAD_PID ]] && wait "$HEAD_PID" 2>/dev/null
    [[ -n $NODE_PID ]] && wait "$NODE_PID" 2>/dev/null
    [[ -n $RUN ]] && rm -rf "$RUN"
    exit "$rc"
}
trap cleanup EXIT
# A command that fails outside `fail` still says what failed.
on_error() {
    local rc=$? line=$1 command=$2
    echo "cluster.sh: FAILED [$(elapsed) s]: line $line: \`$command\` exited with status $rc" >&2
}
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR
trap 'echo "cluster.sh: FAILED [$(elapsed) s]: interrupted (SIGINT)" >&2; exit 130' INT
trap 'echo "cluster.sh: FAILED [$(elapsed) s]: terminated (SIGTERM)" >&2; exit 143' TERM

# Polls `"$@"` every 0.2 s for up to LIMIT seconds; fails with WHAT if it never
# succeeds, or at once if the head or the second node has exited.
wait_for() {
    local what=$1 limit=$2
    shift 2
    local deadline=$((SECONDS + limit))
    until "$@"; do
        if [[ -n $HEAD_PID ]] && ! is_live "$HEAD_PID"; then
            fail "the head exited while waiting for $what (log below)"
        fi
        if [[ -n $NODE_PID ]] && ! is_live "$NODE_PID"; then
            fail "the second node exited while waiting for $what (log below)"
        fi
        ((SECONDS < deadline)) || fail "no $what within ${limit} s"
        sleep 0.2
    done
}

step "build rayrs and the worker_tree example (debug)"
cargo build -p rayrs
cargo build --example worker_tree
TARGET=$(realpath "${CARGO_TARGET_DIR:-target}")
RAYRS=$TARGET/debug/rayrs
EXAMPLE=$TARGET/debug/examples/worker_tree
[[ -x $RAYRS ]] || fail "no rayrs binary at $RAYRS"
[[ -x $EXAMPLE ]] || fail "no worker_tree binary at $EXAMPLE"

RUN=$(mktemp -d "${TMPDIR:-/tmp}/rayrs-ci.XXXXXX")
HEAD_DIR=$RUN/head
NODE_DIR=$RUN/node
mkdir -p "$HEAD_DIR" "$NODE_DIR"

step "start the head: rayrs start --head --port 0 --num-cpus 2 --dir $HEAD_DIR"
"$RAYRS" start --head --port 0 --num-cpus 2 --dir "$HEAD_DIR" >"$RUN/head.log" 2>&1 &
HEAD_PID=$!
wait_for "$HEAD_DIR/gcs_address" 30 test -s "$HEAD_DIR/gcs_address"
ADDR=$(tr -d '[:space:]' <"$HEAD_DIR/gcs_address")
CREDS=$HEAD_DIR/credentials
echo "head pid $HEAD_PID, cluster address $ADDR, credentials $CREDS"

step "join a second node: rayrs start --address $ADDR --credentials $CREDS --num-cpus 2 --dir $NODE_DIR"
"$RAYRS" start --address "$ADDR" --credentials "$CREDS" --num-cpus 2 --dir "$NODE_DIR" \
    >"$RUN/node.log" 2>&1 &
NODE_PID=$!

step "wait for rayrs status to show 2 alive nodes"
two_alive() {
    "$RAYRS" status --dir "$HEAD_DIR" >"$RUN/status.txt" 2>&1 &&
        grep -qx 'Nodes: 2 (2 alive, 0 dead)' "$RUN/status.txt"
}
wait_for "2 alive nodes in rayrs status" 30 two_alive
cat "$RUN/status.txt"

step "run worker_tree on the cluster: RAY_ADDRESS=$ADDR RAY_CREDENTIALS=$CREDS"
# In the background and waited for, so that a signal to this script runs the
# EXIT trap at once (and the trap stops the driver too).
RAY_ADDRESS=$ADDR RAY_CREDENTIALS=$CREDS timeout 120 "$EXAMPLE" >"$RUN/driver.log" 2>&1 &
DRIVER_PID=$!
driver_rc=0
wait "$DRIVER_PID" || driver_rc=$?
DRIVER_PID=""
((driver_rc != 124)) || fail "worker_tree ran past 120 s (killed; log below)"
((driver_rc == 0)) || fail "worker_tree exited with status $driver_rc (log below)"
cat "$RUN/driver.log"
grep -qx 'actors created: 12' "$RUN/driver.log" ||
    fail "worker_tree did not report 'actors created: 12'"
grep -qx 'process() calls: 6321' "$RUN/driver.log" ||
    fail "worker_tree did not report 'process() calls: 6321'"

step "rayrs status after the job: 2 alive nodes, CPU used/total on each"
"$RAYRS" status --dir "$HEAD_DIR" >"$RUN/status.txt" 2>&1 || fail "rayrs status failed"
cat "$RUN/status.txt"
grep -qx 'Nodes: 2 (2 alive, 0 dead)' "$RUN/status.txt" ||
    fail "rayrs status does not show 2 alive nodes after the job"
# CPU first; detected resources (memory, GPUs) may follow.
usage_lines=$(grep -cE '^ +node-[0-9]+ +[^ ]+ +alive +CPU [0-9.]+/2(, .*)?$' "$RUN/status.txt" || true)
((usage_lines == 2)) ||
    fail "rayrs status shows CPU used/total for $usage_lines alive node(s), expected 2"

# Information, not a check: where the nodes started worker processes.
for dir in "$HEAD_DIR" "$NODE_DIR"; do
    cached=0
    if [[ -d $dir/binaries ]]; then
        cached=$(find "$dir/binaries" -type f | wc -l)
    fi
    echo "$(basename "$dir"): $cached worker binary(ies) in its cache"
done

step "rayrs list jobs shows the finished job"
# The GCS finishes a job when its driver's connection closes, which may
# take until the connection's idle timeout after the driver exits.
job_finished() {
    "$RAYRS" list jobs --dir "$HEAD_DIR" >"$RUN/jobs.txt" 2>&1 &&
        grep -qE '^job-[0-9]+ +finished +.*worker_tree$' "$RUN/jobs.txt"
}
wait_for "finished worker_tree job in rayrs list jobs" 30 job_finished
cat "$RUN/jobs.txt"

step "rayrs insight export: the head's views of the job, from every process's records"
# Every process of the job shipped its records to the head (workers ship
# their last ones when their job ends); the head's logical view must count
# all 6321 process() calls and the 12 actors.
process_calls() {
    "$RAYRS" insight export --dir "$HEAD_DIR" --view logical --format json \
        --out "$RUN/logical.json" 2>"$RUN/insight.txt" &&
        python3 - "$RUN/logical.json" <<'PY'
import json, sys
view = json.load(open(sys.argv[1]))
calls = sum(e["count"] for e in view["call_edges"] if e["name"].endswith("process"))
actors = sum(len(c["actors"]) for c in view["classes"])
print(f"head's logical view: {calls} process() calls, {actors} actors")
sys.exit(0 if calls == 6321 and actors == 12 else 1)
PY
}
wait_for "6321 process() calls in the head's logical view" 30 process_calls
"$RAYRS" insight export --dir "$HEAD_DIR" --view flame --format svg --out "$RUN/flame.svg" ||
    fail "rayrs insight export --view flame --format svg failed"
grep -q '<svg' "$RUN/flame.svg" || fail "the flame graph export is not an SVG"
"$RAYRS" insight export --dir "$HEAD_DIR" --view gantt --at 1 --out "$RUN/gantt.json" ||
    fail "rayrs insight export --view gantt --at 1 failed"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$RUN/gantt.json" ||
    fail "the Gantt export replayed at 1 s is not JSON"
ls "$HEAD_DIR"/insight/job-*.log >/dev/null || fail "the head kept no event log of the job"

step "stop: rayrs stop --dir $NODE_DIR, then rayrs stop --dir $HEAD_DIR"
"$RAYRS" stop --dir "$NODE_DIR" || fail "rayrs stop --dir $NODE_DIR failed"
node_rc=0
wait "$NODE_PID" || node_rc=$?
NODE_PID=""
((node_rc == 0)) || fail "the second node exited with status $node_rc on rayrs stop"
"$RAYRS" stop --dir "$HEAD_DIR" || fail "rayrs stop --dir $HEAD_DIR failed"
head_rc=0
wait "$HEAD_PID" || head_rc=$?
HEAD_PID=""
((head_rc == 0)) || fail "the head exited with status $head_rc on rayrs stop"

step "check that no process of this run is left"
deadline=$((SECONDS + 15))
while [[ -n $(run_pids) ]]; do
    if ((SECONDS >= deadline)); then
        ps -o pid,ppid,stat,etime,args -p "$(run_pids | paste -sd,)" >&2 || true
        fail "processes of this run are still alive 15 s after rayrs stop (listed above)"
    fi
    sleep 0.2
done

step "passed"
