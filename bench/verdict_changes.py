"""Which cells of the matrix change verdict between two ``bench/cv_matrix.py --json`` runs (e.g. the
same core judged against the peers before and after they were re-ported, issue 36).

    .venv/bin/python bench/verdict_changes.py OLD.json NEW.json
    .venv/bin/python bench/verdict_changes.py OLD.json --rejudge CACHE.json

With ``--rejudge`` the second run is OLD's own ours judged again against the references in a
``bench/cv_matrix.py --cache`` file (the cells it holds whole): the same ours, other references, so
every change is the references' (e.g. the peers re-ported, their grids swept), whatever core NEW
ran.

For every cell both runs hold (trace, seed, peak use; the chosen candidate of each): whether ours
meets all three targets, what dominates it, which references meet the cell themselves, and how
many references keep the SLO. One line per cell whose verdict, dominators or references met
changed, then the counts (the old run may have judged fewer reference settings: a count of those
losing the SLO is of each run's own). Ours' own numbers are shown from both runs, so that a change of ours
(another core) is told apart from a change of the references.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402
from cv_matrix import SHORT, cell_key, judge, reference_outcomes  # noqa: E402

from autoscaler.policy.model import Policy  # noqa: E402
from autoscaler.sim.backtest import reference_names  # noqa: E402


def cells(path: str) -> dict[tuple, dict]:
    d = json.loads(Path(path).read_text())
    return {(r["trace"], r["seed"], r["pu"]): r for r in d["results"] if r["candidate"] == d["chosen"]}


def rejudged(old: dict[tuple, dict], cache_path: str) -> dict[tuple, dict]:
    """OLD's cells whose references the cache holds whole, ours judged again against them."""
    policy = Policy.model_validate(yaml.safe_load((ROOT / "policies/default.yaml").read_text()))
    wanted = set(reference_names(policy, sweep=True))
    cache = json.loads(Path(cache_path).read_text())
    out = {}
    for k, r in old.items():
        refs = cache.get(cell_key(*k), {})
        if not wanted <= set(refs):
            continue
        met, lost = reference_outcomes(refs, policy)
        out[k] = {**r, "refs": refs, "verdict": judge(r["ours"], refs, policy), "met_by_references": met,
                  "slo_missed_by": lost}
    return out


def summary(r: dict) -> dict:
    v = r["verdict"]
    return {"meets": bool(v["meets_targets"]), "dominated_by": sorted(v.get("dominated_by") or []),
            "met_by": sorted(r.get("met_by_references") or []),
            "slo_lost_by": len(r.get("slo_missed_by") or []),
            "ours_nh": r["ours"]["node_hours"]}


def short_list(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n})" if len(names) > n else "") if names else "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--rejudge", metavar="CACHE")
    args = ap.parse_args()
    if (args.new is None) == (args.rejudge is None):
        ap.error("give NEW or --rejudge CACHE")
    old = cells(args.old)
    new = rejudged(old, args.rejudge) if args.rejudge else cells(args.new)
    both = [k for k in new if k in old]
    changed = 0
    counts = {"old_meets": 0, "new_meets": 0, "old_dominated": 0, "new_dominated": 0, "old_met_by_ref": 0,
              "new_met_by_ref": 0}
    print("| cell | ours meets (old -> new) | dominated by (old -> new) | met by a reference (old -> new) "
          "| references losing the SLO (old -> new) |")
    print("|---|---|---|---|---|")
    for k in both:
        a, b = summary(old[k]), summary(new[k])
        for tag, s in (("old", a), ("new", b)):
            counts[f"{tag}_meets"] += s["meets"]
            counts[f"{tag}_dominated"] += bool(s["dominated_by"])
            counts[f"{tag}_met_by_ref"] += bool(s["met_by"])
        if (a["meets"], bool(a["dominated_by"]), bool(a["met_by"])) == (b["meets"], bool(b["dominated_by"]),
                                                                         bool(b["met_by"])):
            continue
        changed += 1
        ours = "" if a["ours_nh"] == b["ours_nh"] else f" (ours {a['ours_nh']:,.1f} -> {b['ours_nh']:,.1f} node-hours)"
        print(f"| {SHORT.get(k[0], k[0])} seed {k[1]} pu {k[2]}{ours} | {a['meets']} -> {b['meets']} "
              f"| {short_list(a['dominated_by'])} -> {short_list(b['dominated_by'])} "
              f"| {short_list(a['met_by'])} -> {short_list(b['met_by'])} "
              f"| {a['slo_lost_by']} -> {b['slo_lost_by']} |")
    print()
    print(f"{len(both)} cells in both; {changed} changed verdict. Ours meets all three: {counts['old_meets']} -> "
          f"{counts['new_meets']}; dominated: {counts['old_dominated']} -> {counts['new_dominated']}; met by some "
          f"reference: {counts['old_met_by_ref']} -> {counts['new_met_by_ref']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
