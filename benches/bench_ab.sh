#!/bin/bash
# Alternates two criterion bench binaries (old, new) ROUNDS times over the
# benches matching FILTER and prints each measurement: on this VM timings
# swing up to 2x between minutes, so only alternated runs compare.
# usage: bench_ab.sh OLD_BENCH_BINARY NEW_BENCH_BINARY ROUNDS FILTER
# (the binaries: copies of target/release/deps/insight-<hash> built from
# each commit with `cargo bench --bench insight --no-run`)
OLD=$1; NEW=$2; R=$3; F=$4
for i in $(seq "$R"); do for b in old new; do
  BIN=$OLD; [ $b = new ] && BIN=$NEW
  "$BIN" --bench "$F" --warm-up-time 1 --measurement-time 3 --noplot 2>/dev/null |
    awk -v b=$b '/^insight\//{name=$1} /time:/ && name != "" {print b, name, $5, $6; name=""}'
done; done
