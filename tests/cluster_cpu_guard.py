#!/usr/bin/env python3
"""The replicated path's CPU guard: what a 3-node cluster's members together spend per
acquire+release cycle, as a ratio to what a single node spends on the same cycles.

Runs `flockd-bench --cluster` (workload 2, 64 connections, `appendfsync always`, rounds that
alternate a single node, the cluster through its leader and through a follower) and reads the
server CPU per cycle of each from its report. Absolute CPU times move with the machine's load;
the ratios, measured side by side, repeat far better, though not closely on this shared 2-core
machine (debug builds, leader/single: 4.45 and 4.55 in two runs on 2026-12-05; 5.57 to 6.95
over the runs of 2026-12-06). Fails (exit 1) when a ratio is more than MARGIN above the
committed figure in tests/cluster_cpu_guard.toml in the first measurement and in AGAIN more;
with --update it rewrites the figures instead (commit them with the
change that moved them, and say why in --reason).

The figures belong to one build profile: CI measures the debug build its tests already made
(a release build of the workspace costs minutes on 2 cores); the file says which.

Usage: cluster_cpu_guard.py --bench BENCH --flockd FLOCKD [--profile debug]
                            [--update --reason TEXT]
"""

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from datetime import datetime, timezone
from pathlib import Path

MARGIN = 0.20
# Measurements after a first one over the limit, before the guard fails.
AGAIN = 2
FIGURES = Path(__file__).with_name("cluster_cpu_guard.toml")
TARGETS = {
    "single": "single node, appendfsync always",
    "leader": "3-node cluster, through the leader",
    "follower": "3-node cluster, through a follower",
}


def cpu_per_cycle(report):
    """Server CPU µs per cycle of each target, from the report's replication table:
    `| target | per s | ratio | server CPU µs per op | cores busy | errors |`."""
    found = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6:
            continue
        for key, label in TARGETS.items():
            if cells[0] == label and key not in found:
                try:
                    found[key] = float(cells[3].replace(",", ""))
                except ValueError:
                    raise SystemExit(f"cluster CPU guard: no CPU figure in {line!r}")
                if int(cells[5].replace(",", "")) != 0:
                    raise SystemExit(f"cluster CPU guard: errors in {line!r}")
    missing = [k for k in TARGETS if k not in found]
    if missing:
        raise SystemExit(f"cluster CPU guard: the report has no row for {missing}:\n{report}")
    return found


def measure(bench, flockd):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.md"
        cmd = [bench, "--only", "none", "--no-sweep", "--no-cross-check", "--fsync", "always",
               "--cluster", "--rounds", "3", "--duration-ms", "2000", "--flockd", flockd,
               "--out", str(out), "--svg", str(Path(tmp) / "chart.svg")]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise SystemExit(f"cluster CPU guard: flockd-bench failed:\n{run.stderr[-3000:]}")
        cpu = cpu_per_cycle(out.read_text())
    return {
        "leader": cpu["leader"] / cpu["single"],
        "follower": cpu["follower"] / cpu["single"],
    }, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--flockd", required=True)
    ap.add_argument("--profile", default="debug")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--reason", default="")
    args = ap.parse_args()

    ratios, cpu = measure(args.bench, args.flockd)
    if args.update:
        if not args.reason:
            raise SystemExit("cluster CPU guard: --update needs --reason")
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        FIGURES.write_text(
            "# Server CPU per replicated acquire+release cycle (3 members together) over a single\n"
            "# node's for the same cycles, measured side by side by tests/cluster_cpu_guard.py: CI\n"
            f"# fails when a ratio grows more than {MARGIN:.0%} above these. Rewritten with --update;\n"
            "# commit it with the change that moved them.\n"
            f'profile = "{args.profile}"\n'
            f'updated = "{stamp}"\n'
            f"reason = {reason_literal(args.reason)}\n\n"
            "[ratio]\n"
            f"leader = {ratios['leader']:.2f}\n"
            f"follower = {ratios['follower']:.2f}\n")
        print(f"cluster CPU guard: figures written to {FIGURES}: {fmt(ratios)} (µs per cycle {cpu})")
        return 0

    committed = tomllib.loads(FIGURES.read_text())
    if committed.get("profile") != args.profile:
        raise SystemExit(f"cluster CPU guard: the figures are for a {committed.get('profile')} "
                         f"build, this is a {args.profile} one")
    limits = {k: v * (1 + MARGIN) for k, v in committed["ratio"].items()}
    over = [k for k in limits if ratios[k] > limits[k]]
    table(committed["ratio"], ratios, cpu)
    # Noise on this shared machine only adds CPU, and one run in a busy minute can pass the
    # margin (local CI at 8310089, no change to the server: leader 6.95 and follower 8.79
    # against limits of 7.09 and 8.84). A regression is over the limit every time.
    for again in range(1, AGAIN + 1):
        if not over:
            break
        print(f"cluster CPU guard: {over} above the limit; measuring again ({again} of {AGAIN})")
        ratios, cpu = measure(args.bench, args.flockd)
        table(committed["ratio"], ratios, cpu)
        over = [k for k in limits if ratios[k] > limits[k]]
    if over:
        print(f"cluster CPU guard: FAILED: {over} grew more than {MARGIN:.0%} over the committed "
              "ratio (a hand-off or a copy more per cycle?). If the change is deliberate, rewrite "
              "the figures with --update --reason.")
        return 1
    print("cluster CPU guard: ok")
    return 0


def reason_literal(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fmt(ratios):
    return ", ".join(f"{k}/single {v:.2f}" for k, v in ratios.items())


def table(committed, ratios, cpu):
    print(f"single node: {cpu['single']:.1f} µs CPU per cycle")
    print("| path | µs per cycle | ratio to single | committed | limit |")
    print("|---|--:|--:|--:|--:|")
    for k in ("leader", "follower"):
        print(f"| {k} | {cpu[k]:.1f} | {ratios[k]:.2f} | {committed[k]:.2f} | "
              f"{committed[k] * (1 + MARGIN):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
