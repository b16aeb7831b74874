"""Print the advisor's accuracy against published measurements (Markdown).

    .venv/bin/python bench/advisor_accuracy.py            # full table + summary
    .venv/bin/python bench/advisor_accuracy.py --summary  # summary only

The rows, sources and tolerances live in ``suanli.advisor.validation``; this script only
formats them, so BENCHMARKS.md and the test suite can never disagree.
"""

from __future__ import annotations

import sys

from suanli.advisor.validation import reference_points, summarise


def main(argv: list[str]) -> None:
    points = reference_points()
    if "--summary" not in argv:
        print("| kind | case | published | estimate | error | conf. | source |")
        print("|---|---|---:|---:|---:|---|---|")
        for p in points:
            mark = "" if p.in_median else " †"
            print(
                f"| {p.kind}{mark} | {p.case} | {p.published:,.2f} {p.unit} | {p.estimated:,.2f} | "
                f"{p.relative_error:+.1%} | {p.confidence} | {p.source} |"
            )
        print("\n† not in the memory median (a bound, or time/throughput reported separately)\n")
    print("| kind | rows | median abs. error | worst abs. error | worst case |")
    print("|---|---:|---:|---:|---|")
    for s in summarise(points):
        print(f"| {s.kind} | {s.count} | {s.median_abs_error:.1%} | {s.worst_abs_error:.1%} | {s.worst_case} |")


if __name__ == "__main__":
    main(sys.argv[1:])
