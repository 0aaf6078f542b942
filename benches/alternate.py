#!/usr/bin/env python3
"""Alternates two `workloads` binaries and prints paired ratios.

    python3 benches/alternate.py OLD_BIN NEW_BIN ROUNDS MODE WORKLOAD...

Each round runs `BIN --mode MODE WORKLOAD...` once per binary, the first
binary alternating between rounds, and keeps each workload's headline
median. Prints, per workload, both medians over the rounds, the median of
the per-round ratios new / old, and every round's figures.
"""
import json
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    old, new, rounds, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    workloads = sys.argv[5:]
    bins = {"old": old, "new": new}
    res = {w: {"old": [], "new": []} for w in workloads}
    for i in range(rounds):
        for b in ("old", "new") if i % 2 == 0 else ("new", "old"):
            out = subprocess.run(
                [bins[b], "--mode", mode] + workloads, capture_output=True, text=True
            ).stdout
            for line in out.splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("workload") in res:
                    res[j["workload"]][b].append(j["median"])
    for w in workloads:
        o, n = res[w]["old"], res[w]["new"]
        if not o or not n:
            print(w, "no figures")
            continue
        ratios = [b / a for a, b in zip(o, n)]
        print(
            w,
            "old median", round(statistics.median(o)),
            "new median", round(statistics.median(n)),
            "paired ratio median", round(statistics.median(ratios), 3),
            "rounds", len(ratios),
        )
        print("  old", [round(x) for x in o])
        print("  new", [round(x) for x in n])


if __name__ == "__main__":
    main()
