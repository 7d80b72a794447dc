#!/usr/bin/env python3
"""Tables from Nsight Compute's --csv metrics output (scripts/gpu-test.sh: kernels, stalls, utilization).

    ncu-table.py kernels|stalls|utilization FILE.csv

kernels: per kernel name, its launches' mean and total time; stalls: per launch, its time,
instruction count and top 7 warp-stall reasons (cycles per issued instruction); utilization: per
launch, its time, L2 throughput (share of peak and TB/s), tensor pipe, issue slots, DRAM and warps
resident (shares of their sustained peaks)."""
import collections
import csv
import sys

US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
TB_PER_S = {"byte/s": 1e-12, "Kbyte/s": 1e-9, "Mbyte/s": 1e-6, "Gbyte/s": 1e-3, "Tbyte/s": 1.0}


def launches(path):
    """{(launch ID, kernel name): {metric: (unit, value)}} in launch order."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        sys.exit("  no kernel rows")
    h = rows[0]
    i, k, n, u, v = (h.index(x) for x in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    per = collections.OrderedDict()
    for r in rows[1:]:
        per.setdefault((r[i], r[k]), {})[r[n]] = (r[u], float(r[v].replace(",", "")))
    return per


def microseconds(m):
    unit, value = m.get("gpu__time_duration.sum", ("", float("nan")))
    return value * US.get(unit, 1.0)


def kernels(per):
    t = collections.defaultdict(list)
    for (_, k), m in per.items():
        t[k.split("(")[0].split("<")[0]].append(microseconds(m))
    for name, xs in sorted(t.items(), key=lambda kv: -sum(kv[1])):
        print("  %-28s %4d launches  mean %9.2f us  total %10.1f us" % (name[:28], len(xs), sum(xs) / len(xs), sum(xs)))


def stalls(per):
    for (i, k), m in per.items():
        st = {n.replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", ""): v
              for n, (_, v) in m.items() if "stalled" in n}
        top = sorted(st.items(), key=lambda x: -x[1])[:7]
        ns = "%.0f" % (microseconds(m) * 1e3) if "gpu__time_duration.sum" in m else "?"
        inst = "%.0f" % m["smsp__inst_executed.sum"][1] if "smsp__inst_executed.sum" in m else "?"
        print(f"{i:>4} {k[:40]:40s} {ns:>7} ns, {inst:>8} instructions | " + ", ".join(f"{a} {b:.2f}" for a, b in top))


def utilization(per):
    print("  %4s %-32s %9s %6s %7s %7s %7s %6s %7s" % ("id", "kernel", "us", "L2 %", "L2 TB/s", "tensor%", "issue%", "DRAM%", "warps%"))
    for (i, k), m in per.items():
        g = lambda n: m.get(n, ("", float("nan")))[1]
        unit, bps = m.get("lts__t_bytes.sum.per_second", ("", float("nan")))
        print("  %4s %-32s %9.1f %6.1f %7.2f %7.1f %7.1f %6.1f %7.1f" % (
            i, k.split("(")[0][:32], microseconds(m), g("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
            bps * TB_PER_S.get(unit, float("nan")), g("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
            g("sm__inst_issued.avg.pct_of_peak_sustained_active"), g("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            g("sm__warps_active.avg.pct_of_peak_sustained_active")))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("kernels", "stalls", "utilization"):
        sys.exit(__doc__)
    {"kernels": kernels, "stalls": stalls, "utilization": utilization}[sys.argv[1]](launches(sys.argv[2]))
