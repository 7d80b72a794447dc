#!/usr/bin/env python3
"""Sums the per-launch timeline of a TensorNet CUDA build with TN_TIMELINE 1.

Reads the "TL ..." lines that such a build prints to stderr when a plan is freed (bench_nnp's
output, scripts/gpu-test.sh timeline) and prints, per plan, the launches of one step averaged over
the whole steps in the window: when block 0 started after the predecessor's wait ended (µs), how
long it then waited, and its time on the chain of launches, from the end of its wait to the end of
the next launch's. A step starts at the launch that does not wait (k_tn_positions, an ordinary
launch, after OpenMM's own kernels), so the last launch's time includes OpenMM's kernels up to the
next step. The order of the launches is docs/cuda.md's kernel table. bench_nnp frees two plans per
system: first that of its few direct libnnp evaluations (its "reduce" check), then its Context's,
whose window holds the last replays of the graph.

usage: tn-timeline.py FILE
"""
import re
import sys


def plans(lines):
    plan = None
    for line in lines:
        if line.startswith("TL atoms"):
            plan = {"atoms": int(line.split()[2]), "launches": int(line.split()[4]), "rows": []}
            yield plan
            continue
        m = re.match(r"TL \d+ start-after-prev-wait (\S+) waited (\S+) this-wait-to-next-wait (\S+)", line)
        if m and plan is not None:
            plan["rows"].append(tuple(float(x) for x in m.groups()))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        found = [p for p in list(plans(f.read().splitlines())) if p["rows"]]
    if not found:
        sys.exit("tn-timeline: no timeline in %s (a build with TN_TIMELINE 1 prints one)" % sys.argv[1])
    for p in found:
        rows = p["rows"]
        # the launches that do not wait (k_tn_positions, an ordinary launch, and any whose
        # predecessor ended before it started) repeat with the step's period; the step starts at
        # the one that starts longest after its predecessor (after OpenMM's kernels)
        idle = [r[1] < 0.1 for r in rows]
        period = next((n for n in range(2, len(rows) // 2 + 1) if all(idle[i] == idle[i + n] for i in range(len(rows) - n))), 0)
        if not period or not any(idle[:period]):
            print("%d atoms, a plan of %d launches: fewer than two whole steps in the window" % (p["atoms"], p["launches"]))
            continue
        phase = max((k for k in range(period) if idle[k]), key=lambda k: rows[k][0])
        steps = list(range(phase, len(rows) - period + 1, period))
        mean = [[sum(rows[s + k][q] for s in steps) / len(steps) for q in range(3)] for k in range(period)]
        print("%d atoms, a plan of %d launches: %d launches per step, %d steps averaged, %.1f us on the chain" %
              (p["atoms"], p["launches"], period, len(steps), sum(m[2] for m in mean)))
        print("  launch  start  waited  on the chain (us)")
        for k, m in enumerate(mean):
            print("  %6d  %5.2f  %6.2f  %6.2f" % (k, m[0], m[1], m[2]))


if __name__ == "__main__":
    main()
