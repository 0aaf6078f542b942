#!/bin/bash
# Alternates two builds of the workload harness, each with insight recording
# off and on (RAYRS_INSIGHT=0/1), and prints the median throughput per
# (binary, recording, workload), the on/off ratio of those medians, and the
# median of the rounds' own ratios (each round runs off then on, so a slow
# minute of the VM weighs on both sides of its ratio). Needs python3.
# usage: ab.sh OLD NEW ROUNDS MODE IDS... : alternates old/new x insight off/on; medians per (binary, insight, workload)
OLD=$1; NEW=$2; R=$3; MODE=$4; shift 4
for i in $(seq $R); do for b in old new; do for v in 0 1; do
  BIN=$OLD; [ $b = new ] && BIN=$NEW
  RAYRS_INSIGHT=$v $BIN --mode $MODE "$@" 2>/dev/null | python3 -c "
import sys,json
for l in sys.stdin:
    l=l.strip()
    if not l.startswith('{'): continue
    d=json.loads(l); t=d.get('figures',{}).get('throughput',{})
    if 'median' in t: print('$b','$v',d['workload'],t['median'])
"
done; done; done | python3 -c "
import sys,statistics as st
from collections import defaultdict
d=defaultdict(list)
for l in sys.stdin:
    b,v,w,x=l.split(); d[(w,b,v)].append(float(x))
for w in sorted({k[0] for k in d}):
  for b in ['old','new']:
    off=st.median(d[(w,b,'0')]); on=st.median(d[(w,b,'1')])
    paired=st.median(f/o for f,o in zip(d[(w,b,'0')],d[(w,b,'1')]))
    print(f'{w} {b}: off {off:,.0f}/s on {on:,.0f}/s ratio {off/on:.2f}x paired {paired:.2f}x  on-runs {[round(x/1e3) for x in d[(w,b,\"1\")]]} off-runs {[round(x/1e3) for x in d[(w,b,\"0\")]]}')
"
