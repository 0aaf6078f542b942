#!/usr/bin/env python3
"""Puts Ray's and ray-rs's workload JSON lines side by side, as markdown.

    python benches/ray/table.py RAY.jsonl EMBEDDED.jsonl CLUSTER.jsonl

Each file holds the JSON lines of one harness (benches/ray/workloads.py, or
`workloads --mode embedded|cluster`); lines that are not JSON objects with a
`workload` key are skipped, and a missing or empty file leaves its columns
blank. One row per figure of each workload, in the order the lines list
them, Ray's first; a value is `median [min–max]` over the runs.
The ratios say how many times better ray-rs is than Ray: for rates
(units ending in `/s`) ray-rs / Ray, for times and sizes Ray / ray-rs;
>1 means ray-rs is better.
"""

import json
import sys

MISSING = "—"


def load(path):
    """{workload id: JSON line} from a file of JSON lines."""
    lines = {}
    try:
        with open(path) as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict) and "workload" in line:
                    lines[line["workload"]] = line
    except FileNotFoundError:
        pass
    return lines


def number(v):
    """A value with about 3 significant digits, without exponents."""
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return f"{v:.3g}"


def cell(figure):
    return MISSING if figure is None else (
        f"{number(figure['median'])} [{number(figure['min'])}–{number(figure['max'])}]")


def ratio(unit, ray_fig, rs_fig):
    """How many times better ray-rs's median is than Ray's (>1: ray-rs)."""
    if ray_fig is None or rs_fig is None:
        return MISSING
    ray_v, rs_v = ray_fig["median"], rs_fig["median"]
    higher_is_better = unit.endswith("/s")
    num, den = (rs_v, ray_v) if higher_is_better else (ray_v, rs_v)
    return f"{number(num / den)}×" if den else MISSING


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ray, embedded, cluster = (load(p) for p in sys.argv[1:])
    ids = sorted(set(ray) | set(embedded) | set(cluster),
                 key=lambda w: (not w.startswith("W"), w))
    print("| workload | figure (unit) | Ray | ray-rs embedded | ray-rs cluster "
          "| embedded vs Ray (>1: ray-rs better) "
          "| cluster vs Ray (>1: ray-rs better) |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for wid in ids:
        lines = [src.get(wid, {}) for src in (ray, embedded, cluster)]
        names = []
        for line in lines:
            names += [n for n in line.get("figures", {}) if n not in names]
        for name in names:
            figs = [line.get("figures", {}).get(name) for line in lines]
            unit = next(f["unit"] for f in figs if f is not None)
            print(f"| {wid} | {name} ({unit}) | {cell(figs[0])} | {cell(figs[1])} "
                  f"| {cell(figs[2])} | {ratio(unit, figs[0], figs[1])} "
                  f"| {ratio(unit, figs[0], figs[2])} |")
        for label, line in zip(("Ray", "embedded", "cluster"), lines):
            if "not_run" in line.get("info", {}):
                notes.append(f"{wid} {label}: not run: {line['info']['not_run']}")
    for note in notes:
        print(f"\n{note}")


if __name__ == "__main__":
    main()
