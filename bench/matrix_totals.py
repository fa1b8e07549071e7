"""Totals of one candidate over several ``bench/cv_matrix.py --json`` files (e.g. seed 0 from a grid
run and seeds 1-2 from another): per trace and in all, ours', the rate oracle's and the oracle's
saving of always-on's node-hours, the shares of it ours gets, SLO misses and the worst gap, and
the cells that meet all three targets.

    .venv/bin/python bench/matrix_totals.py FILE[:CANDIDATE_SUBSTRING] ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from cv_matrix import SHORT, share  # noqa: E402


def rows_of(spec: str) -> list[dict]:
    path, _, want = spec.partition(":")
    d = json.loads(Path(path).read_text())
    keep = [i for i, c in enumerate(d["candidates"]) if want in c] if want else [d["chosen"]]
    return [r for r in d["results"] if r["candidate"] == keep[0]]


def totals(rows: list[dict]) -> str:
    base = sum(r["refs"]["static"]["node_hours"] for r in rows)
    ours = base - sum(r["ours"]["node_hours"] for r in rows)
    oracle = base - sum(r["refs"]["oracle"]["node_hours"] for r in rows)
    rated = [r for r in rows if r["refs"].get("oracle_rate")]
    rbase = sum(r["refs"]["static"]["node_hours"] for r in rated)
    rours = rbase - sum(r["ours"]["node_hours"] for r in rated)
    rate = rbase - sum(r["refs"]["oracle_rate"]["node_hours"] for r in rated)
    gaps = [r["verdict"]["slo_gap_vs_static_pp"] for r in rows]
    misses = sum(not r["verdict"]["slo_within_0_5pp_of_static"] for r in rows)
    met = sum(r["verdict"]["meets_targets"] for r in rows)
    above = sum(r["verdict"].get("within_rate_oracle") is False for r in rows)
    dominated = sum(bool(r["verdict"]["dominated_by"]) for r in rows)
    out = (f"{len(rows)} cells: {met} meet all three; {misses} SLO misses (worst gap {max(gaps):+.3f} pp); "
           f"{above} above the rate oracle's node-hours; {dominated} dominated. Saved: ours {100 * ours / base:.2f}% "
           f"of always-on's node-hours, the oracle {100 * oracle / base:.2f}% (ours gets {share(ours, oracle)})")
    if rated:
        out += (f"; on the {len(rated)} cells with a rate oracle ours {100 * rours / rbase:.2f}%, the rate oracle "
                f"{100 * rate / rbase:.2f}% (ours gets {share(rours, rate)})")
    return out


def main(argv: list[str]) -> int:
    rows = [r for spec in argv for r in rows_of(spec)]
    print("all:", totals(rows))
    for trace in sorted({r["trace"] for r in rows}, key=lambda t: list(SHORT).index(t) if t in SHORT else 9):
        print(f"  {SHORT.get(trace, trace)}:", totals([r for r in rows if r["trace"] == trace]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
