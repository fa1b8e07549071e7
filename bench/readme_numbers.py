"""The README's "How good it is" numbers, from the benchmarks' last output files (issue 21).

    .venv/bin/python bench/readme_numbers.py                  # print the README section
    .venv/bin/python bench/readme_numbers.py --check          # exit 1 if README.md differs from it
    .venv/bin/python bench/readme_numbers.py --compare FILE   # refresh the peers' part from a run of
        autoscaler simulate --policy policies/default.yaml --trace examples/traces/servegen-m-small --compare --json
    .venv/bin/python bench/readme_numbers.py --matrix FILE    # refresh the matrix part from a run of
        bench/cv_matrix.py --grid ... --json FILE   (the command is in docs/matrix.md)

The numbers live in ``bench/results/readme-numbers.json``; ``--compare`` and ``--matrix`` rewrite
the part they are given (``--compare`` also keeps the raw run as
``bench/results/compare-servegen-m-small.json``). The section is printed as Markdown, exactly as it
stands in README.md between its ``readme-numbers`` markers; ``tests/test_readme_numbers.py`` checks
that the two agree, and that the stored summaries are what this script computes from the raw files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
NUMBERS = RESULTS / "readme-numbers.json"
COMPARE_RAW = RESULTS / "compare-servegen-m-small.json"
README = ROOT / "README.md"
BEGIN = "<!-- readme-numbers: begin (rendered by bench/readme_numbers.py; do not edit by hand) -->"
END = "<!-- readme-numbers: end -->"

SHORT = {"azure-2023-conv": "azure-conv (1 h)", "mooncake-fast25-conversation": "mooncake (1 h)",
         "servegen-m-small": "m-small (14 d)", "servegen-m-mid": "m-mid (14 d)", "servegen-mm-image": "mm-image (1 d)"}
# Columns of the peers' table, in the order `simulate --compare` prints them.
CONTROLLERS = (("ours", None), ("always-on", "static"), ("HPA at 0.7", "hpa"), ("Knative KPA", "kpa"),
               ("AIBrix APA", "apa"), ("Ray Serve", "ray_serve"), ("Dynamo planner", "dynamo_planner"),
               ("rate oracle", "oracle_rate"), ("oracle", "oracle"))


def summarise_compare(run: dict[str, Any]) -> dict[str, Any]:
    """The peers' part: each controller's node-hours, saving, SLO attainment, capacity misses and
    groups started, from one ``simulate --compare --json`` object."""
    rows = []
    for label, key in CONTROLLERS:
        r = run if key is None else run["reference"].get(key)
        if r is None:  # (a reference the run does not hold: the rate oracle of recorded arrivals)
            continue
        rows.append({"controller": label, "node_hours": r["node_hours"], "savings_pct": r["savings_pct"],
                     "slo_attainment": r["slo_attainment"], "capacity_misses": r["capacity_misses"],
                     "groups_started": r["scale_ups"]})
    v = run["verdict"]
    return {"requests": run["requests"], "baseline_node_hours": run["baseline_node_hours"], "controllers": rows,
            "slo_gap_vs_static_pp": v["slo_gap_vs_static_pp"], "node_hours_vs_oracle": v["node_hours_vs_oracle"],
            "slo_within_0_5pp_of_static": v["slo_within_0_5pp_of_static"],
            "node_hours_vs_oracle_rate": v.get("node_hours_vs_oracle_rate"),
            "within_rate_oracle": v.get("within_rate_oracle"), "dominated_by": v["dominated_by"]}


def summarise_matrix(cv: dict[str, Any]) -> dict[str, Any]:
    """The matrix part, per trace: cells meeting all three targets in-sample (the candidate chosen on
    all five traces) and out-of-sample (the candidate its fold chose without that trace), and the
    in-sample misses by target, from one ``bench/cv_matrix.py --json`` file."""
    chosen, folds, results = cv["chosen"], cv["folds"], cv["results"]
    traces = []
    for trace in folds:
        ins = [r for r in results if r["trace"] == trace and r["candidate"] == chosen]
        oos = [r for r in results if r["trace"] == trace and r["candidate"] == folds[trace]]
        base = sum(r["refs"]["static"]["node_hours"] for r in ins)
        rate = [r["refs"].get("oracle_rate") for r in ins]
        traces.append({
            "trace": SHORT.get(trace, trace), "cells": len(ins),
            "in_sample": sum(r["verdict"]["meets_targets"] for r in ins),
            "out_of_sample": sum(r["verdict"]["meets_targets"] for r in oos),
            "slo_misses": sum(not r["verdict"]["slo_within_0_5pp_of_static"] for r in ins),
            "worst_gap_pp": max(r["verdict"]["slo_gap_vs_static_pp"] for r in ins),
            "saved_pct": round(100 * (base - sum(r["ours"]["node_hours"] for r in ins)) / base, 2),
            "rate_oracle_saved_pct": None if None in rate else round(
                100 * (base - sum(r["node_hours"] for r in rate if r)) / base, 2),
            "oracle_saved_pct": round(100 * (base - sum(r["refs"]["oracle"]["node_hours"] for r in ins)) / base, 2),
            "rate_oracle_misses": sum(r["verdict"].get("within_rate_oracle") is False for r in ins),
            "hpa_dominated": sum(bool(r["verdict"]["dominated_by_hpa"]) for r in ins),
            "peer_dominated": sum(any(r["verdict"]["peer_dominating"].values()) for r in ins)})
    return {"candidate": cv["candidates"][chosen], "traces": traces}


def bars(c: dict[str, Any]) -> str:
    """Which of the SLO and node-hours bars the 14-day cell misses, in words."""
    missed = [name for name, ok in (("the SLO bar", c["slo_within_0_5pp_of_static"]),
                                    ("the rate oracle's node-hours", c.get("within_rate_oracle") is not False))
              if not ok]
    return "a cell that meets both bars" if not missed else "a cell that misses " + " and ".join(missed)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(numbers: dict[str, Any]) -> str:
    """The README section, between (and including) its markers."""
    m, c = numbers["matrix"], numbers["compare"]
    cells = sum(t["cells"] for t in m["traces"])
    ins = sum(t["in_sample"] for t in m["traces"])
    oos = sum(t["out_of_sample"] for t in m["traces"])
    out = [BEGIN,
           f"**The matrix** (one default policy, no per-trace setting; 5 shared traces x 3 seeds x 3 peak uses "
           f"= {cells} cells; a cell meets its targets when its SLO attainment is within 0.5 pp of always-on's, "
           f"its node-hours at most the rate oracle's (ServeGen traces: it knows each window's future rate, not "
           f"its draws), and no setting of HPA or of a peer does better on both): **{ins} of {cells} cells meet "
           f"all three in-sample, {oos} of {cells} out-of-sample** (leave one trace out).",
           "",
           "| trace | saved % of always-on's node-hours | rate oracle saves % | oracle saves % | worst SLO gap pp "
           "| meets all three, in-sample | out-of-sample | SLO misses | above the rate oracle "
           "| HPA-dominated | peer-dominated |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in m["traces"]:
        out.append(f"| {t['trace']} | {_pct(t['saved_pct'])} | {_pct(t['rate_oracle_saved_pct'])} "
                   f"| {_pct(t['oracle_saved_pct'])} | {t['worst_gap_pp']:+.3f} "
                   f"| {t['in_sample']} of {t['cells']} | {t['out_of_sample']} of {t['cells']} "
                   f"| {t['slo_misses']} | {t['rate_oracle_misses']} | {t['hpa_dominated']} | {t['peer_dominated']} |")
    out += ["",
            f"**The peers**, ported from their source, on the 14-day ServeGen m-small trace "
            f"({c['requests']:,} requests, peak use 0.5, seed 0; always-on is "
            f"{c['baseline_node_hours']:,.1f} node-hours):",
            "",
            "| controller | node-hours | saving % | SLO attainment % | capacity misses | groups started |",
            "|---|---|---|---|---|---|"]
    for r in c["controllers"]:
        out.append(f"| {r['controller']} | {r['node_hours']:,.1f} | {r['savings_pct']:.2f} "
                   f"| {100 * r['slo_attainment']:.3f} | {r['capacity_misses']:,} | {r['groups_started']:,} |")
    dominated = ("dominated by " + ", ".join(c["dominated_by"]) if c["dominated_by"]
                 else "not dominated by any HPA target or any peer")
    rate = c.get("node_hours_vs_oracle_rate")
    out += ["",
            f"Ours here: {c['slo_gap_vs_static_pp']:.3f} pp below always-on's SLO, "
            + ("" if rate is None else f"x{rate:.4f} of the rate oracle's node-hours, ")
            + f"x{c['node_hours_vs_oracle']:.4f} of the oracle's ({bars(c)}), {dominated}.",
            END]
    return "\n".join(out) + "\n"


def readme_section(text: str) -> str:
    """The section as it stands in the README (markers included), or '' when the markers are missing."""
    if BEGIN not in text or END not in text:
        return ""
    start = text.index(BEGIN)
    return text[start:text.index(END, start) + len(END)] + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", metavar="FILE", help="a `simulate --compare --json` output: refresh the peers' part")
    ap.add_argument("--matrix", metavar="FILE", help="a `bench/cv_matrix.py --json` output: refresh the matrix part")
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md's section differs")
    args = ap.parse_args(argv)
    numbers = json.loads(NUMBERS.read_text())
    if args.compare:
        raw = json.loads(Path(args.compare).read_text())
        COMPARE_RAW.write_text(json.dumps(raw, indent=1) + "\n")
        numbers["compare"] = {"source": f"{COMPARE_RAW.relative_to(ROOT)}", **summarise_compare(raw)}
    if args.matrix:
        numbers["matrix"] = {"source": args.matrix, **summarise_matrix(json.loads(Path(args.matrix).read_text()))}
    if args.compare or args.matrix:
        NUMBERS.write_text(json.dumps(numbers, indent=1) + "\n")
    section = render(numbers)
    if args.check:
        if readme_section(README.read_text()) != section:
            print("README.md: the readme-numbers section differs from bench/readme_numbers.py's output",
                  file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
