#!/usr/bin/env python3
"""The instruction-count guard's checker: compares gungraun's counts with the committed figures.

Reads gungraun's machine-readable summaries (`--output-format=json`: one JSON object per
benchmark and line; other lines are skipped), takes each benchmark's callgrind `Ir` (instructions
executed) and compares it with `crates/flockd-instructions/baseline.toml`. Prints a table; exits 1 when
a count grew by more than the tolerance (10%), when a benchmark has no committed figure, or when a
committed one was not measured. With --update it rewrites the baseline from the counts instead
(a deliberate change: commit the new figures with the change, and say why in --reason).

Usage: instruction_guard.py SUMMARY_JSONL BASELINE_TOML [--update --reason TEXT]
"""

import argparse
import json
import sys
import tomllib
from datetime import datetime, timezone

TOLERANCE = 0.10


class SummaryError(Exception):
    """The benchmark output does not hold what the checker needs."""


def instructions(summary):
    """The callgrind Ir of one benchmark summary (gungraun 0.20's summary schema v6):
    `profiles[tool == Callgrind].data.total.metrics.Ir.values.new`."""
    for profile in summary.get("profiles") or []:
        if profile.get("tool") != "Callgrind":
            continue
        ir = (profile.get("data") or {}).get("total", {}).get("metrics", {}).get("Ir", {})
        new = (ir.get("values") or {}).get("new")
        if isinstance(new, int):
            return new
    raise SummaryError(f"no callgrind Ir in the summary of {summary.get('module_path')}")


def bench_id(summary):
    """`group::function::bench`, e.g. `in_process::op_path::batch`."""
    module = summary.get("module_path", "")
    parts = module.split("::")
    # module_path is `<bench file>::<group>::<function>`; the file's name is the same for all.
    name = "::".join(parts[1:]) if len(parts) > 1 else module
    if summary.get("id"):
        name = f"{name}::{summary['id']}"
    return name


def read_counts(path):
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                summary = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "module_path" not in summary:
                continue
            counts[bench_id(summary)] = instructions(summary)
    if not counts:
        raise SummaryError(f"{path}: no benchmark summaries (did the benches run?)")
    return counts


def write_baseline(path, counts, reason):
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Instruction counts (callgrind Ir) of crates/flockd-instructions's benchmarks, held by",
        "# tests/instruction_guard.sh: CI fails when one grows by more than 10% against these.",
        "# Rewritten by `GUARD_UPDATE=1 GUARD_REASON='why' tests/instruction_guard.sh`; commit it",
        "# with the change that moved the counts.",
        f"updated = {json.dumps(stamp)}",
        f"reason = {json.dumps(reason)}",
        "",
        "[instructions]",
    ]
    lines += [f"{json.dumps(name)} = {counts[name]}" for name in sorted(counts)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def compare(committed, counts):
    """Prints the table; returns the problems found (empty: the guard passes)."""
    problems = []
    rows = []
    for name in sorted(set(committed) | set(counts)):
        before, now = committed.get(name), counts.get(name)
        if before is None:
            rows.append((name, "-", f"{now:,}", "-", "NO FIGURE"))
            problems.append(f"{name}: measured but has no committed figure")
            continue
        if now is None:
            rows.append((name, f"{before:,}", "-", "-", "NOT RUN"))
            problems.append(f"{name}: has a committed figure but was not measured")
            continue
        ratio = now / before
        if ratio > 1 + TOLERANCE:
            verdict = "REGRESSION"
            problems.append(f"{name}: {now:,} instructions, {ratio:.3f}x the committed {before:,}")
        elif ratio < 1 - TOLERANCE:
            verdict = "better (update the figure)"
        else:
            verdict = "ok"
        rows.append((name, f"{before:,}", f"{now:,}", f"{ratio:.3f}", verdict))
    header = ("benchmark", "committed", "now", "ratio", "")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:4])]
        print("  ".join(cells + [row[4]]).rstrip())
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summaries", help="gungraun's --output-format=json output")
    parser.add_argument("baseline", help="the committed figures (TOML)")
    parser.add_argument("--update", action="store_true", help="rewrite the figures")
    parser.add_argument("--reason", default="", help="why the figures change (with --update)")
    args = parser.parse_args()

    try:
        counts = read_counts(args.summaries)
    except (OSError, SummaryError) as e:
        print(f"instruction guard: {e}", file=sys.stderr)
        return 2
    if args.update:
        if not args.reason.strip():
            print("instruction guard: an update needs a reason (GUARD_REASON)", file=sys.stderr)
            return 2
        write_baseline(args.baseline, counts, args.reason.strip())
        print(f"instruction guard: wrote {len(counts)} figures to {args.baseline}")
        compare(counts, counts)
        return 0
    try:
        with open(args.baseline, "rb") as f:
            committed = tomllib.load(f).get("instructions", {})
    except (OSError, tomllib.TOMLDecodeError) as e:
        print(f"instruction guard: cannot read {args.baseline}: {e}", file=sys.stderr)
        return 2
    problems = compare(committed, counts)
    if problems:
        print(f"\ninstruction guard: FAILED (tolerance {TOLERANCE:.0%})")
        for p in problems:
            print(f"  {p}")
        print("A deliberate change: GUARD_UPDATE=1 GUARD_REASON='why' tests/instruction_guard.sh,")
        print("then commit crates/flockd-instructions/baseline.toml with the change.")
        return 1
    print(f"\ninstruction guard: ok (every count within +{TOLERANCE:.0%} of its figure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
