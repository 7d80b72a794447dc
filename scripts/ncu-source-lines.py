#!/usr/bin/env python3
"""Per CUDA source line, from Nsight Compute's source page (ncu -i REPORT --page source --csv
--print-source cuda,sass; the kernels built with -lineinfo): the share of each kernel's warp samples
and executed instructions, and the line's top stall reasons. Inlined code counts at every line of its
inlining chain (a helper's line and its caller's), so shares may add up to more than 100%.
  scripts/ncu-source-lines.py SOURCE.csv [LINES]"""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    kernel = file = None
    header = None
    lines = collections.defaultdict(lambda: {"samples": 0, "inst": 0, "src": "", "stalls": collections.Counter()})
    totals = collections.defaultdict(lambda: {"samples": 0, "inst": 0})
    for row in csv.reader(open(path, newline="")):
        if not row:
            continue
        if row[0] == "File Path":
            file = row[1].split("/")[-1]
            continue
        if row[0] == "Function Name":
            kernel = row[1].replace("(bool)", "").split("(")[0].replace("void ", "")
            continue
        if row[0] == "Line No":
            header = row
            continue
        if header is None or not row[0].isdigit():
            continue  # SASS rows under a line, and elisions
        try:
            samples = int(row[header.index("Warp Stall Sampling (All Samples)")])
            inst = int(row[header.index("Instructions Executed")])
        except (ValueError, IndexError):
            continue
        entry = lines[(kernel, file, int(row[0]))]
        entry["samples"] += samples
        entry["inst"] += inst
        entry["src"] = row[1].strip()[:80]
        for j, name in enumerate(header):
            if name.startswith("stall_") and "Not Issued" not in name and j < len(row) and row[j].isdigit():
                entry["stalls"][name[6:]] += int(row[j])
        totals[kernel]["samples"] += samples
        totals[kernel]["inst"] += inst
    if not totals:
        sys.exit("no source lines with metrics (built without -lineinfo?)")
    for kernel, t in totals.items():
        print(f"== {kernel}: {t['samples']} warp samples, {t['inst']} instructions (line sums)")
        rows = sorted(((k, v) for k, v in lines.items() if k[0] == kernel), key=lambda kv: -kv[1]["samples"])[:top]
        for (_, file, line), v in rows:
            stalls = ", ".join(f"{n} {c}" for n, c in v["stalls"].most_common(3))
            print(f"  {100 * v['samples'] / max(t['samples'], 1):5.1f}% samples {100 * v['inst'] / max(t['inst'], 1):5.1f}% inst"
                  f"  {file}:{line}  {v['src']}  [{stalls}]")


if __name__ == "__main__":
    main()
