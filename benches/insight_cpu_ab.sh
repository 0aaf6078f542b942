#!/bin/bash
# Compares the CPU two builds of the workload harness spend applying
# recorded events: runs each build with recording on under `perf record -a`
# and counts the samples of the threads whose names start with COMM
# (`rayrs-insight`: the embedded collector; `ray-daemon`: a cluster's head).
# The order of the two builds alternates round by round (two fixed-order
# sets disagreed: the build run second measured more each time). Prints, per build, the
# median samples and recorded throughput. Build each with a larger `RUNS` in
# examples/workloads/main.rs (e.g. 200, locally) so the runs reach a steady
# state. Needs perf and python3.
# usage: insight_cpu_ab.sh A_BIN B_BIN ROUNDS MODE WORKLOAD COMM
A=$1; B=$2; R=$3; MODE=$4; W=$5; COMM=$6
DATA=$(mktemp); trap 'rm -f "$DATA"' EXIT
for i in $(seq "$R"); do
  if [ $((i % 2)) = 0 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for b in $ORDER; do
    m=$(RAYRS_INSIGHT=1 perf record -q -F 499 -a -o "$DATA" -- "$b" --mode "$MODE" "$W" 2>/dev/null |
      python3 -c "import sys,json; [print(json.loads(l)['median']) for l in sys.stdin if l.startswith('{')]" | head -1)
    s=$(perf report -i "$DATA" --sort comm -F comm,sample --stdio 2>/dev/null |
      awk -v c="$COMM" '$1 ~ "^"c {s+=$2} END{print s+0}')
    echo "$b $m $s"
  done
done | python3 -c "
import sys, statistics as st
from collections import defaultdict
samples = defaultdict(list); tput = defaultdict(list)
for line in sys.stdin:
    b, m, s = line.split(); samples[b].append(int(s)); tput[b].append(float(m))
for b in samples:
    print(b, 'samples median', st.median(samples[b]), samples[b], 'throughput median', round(st.median(tput[b])))
"
