"""Cross-validate a choice between whole matrices: a constant of the core that no policy knob sets
(e.g. the recent rises' window) is one candidate per matrix run, and the choice is checked the way
``bench/cv_matrix.py`` checks a grid of policy knobs: leave one trace out, choose on the other
four by the same score (SLO misses first, then cells meeting all three, then node-hours), and report
the held-out trace's result under that choice.

    .venv/bin/python bench/matrix_folds.py 360=bench/results/cv-matrix.json 180=out/r3/c3.json

Each FILE is a ``bench/cv_matrix.py --json`` output with one candidate (its first is used). Prints,
per trace and candidate: ours' saving, the rate oracle's (where defined), the worst SLO gap, the cells
meeting all three; then each fold's choice and its held-out result.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cv_matrix import SHORT, score, share  # noqa: E402


def load(spec: str) -> tuple[str, list[dict]]:
    label, _, path = spec.partition("=")
    if not path:
        raise SystemExit(f"{spec!r}: expected LABEL=FILE")
    rows = json.loads(Path(path).read_text())["results"]
    first = min(r["candidate"] for r in rows)
    return label, [r for r in rows if r["candidate"] == first]


def summary(rows: list[dict]) -> str:
    base = sum(r["refs"]["static"]["node_hours"] for r in rows)
    ours = base - sum(r["ours"]["node_hours"] for r in rows)
    rated = [r for r in rows if r["refs"].get("oracle_rate")]
    line = f"saves {100 * ours / base:5.2f}%"
    if rated:
        rb = sum(r["refs"]["static"]["node_hours"] for r in rated)
        ro = rb - sum(r["refs"]["oracle_rate"]["node_hours"] for r in rated)
        oo = rb - sum(r["ours"]["node_hours"] for r in rated)
        line += f" (rate oracle {100 * ro / rb:5.2f}%: {share(oo, ro):>4})"
    else:
        line += " " * 31
    gaps = [r["verdict"]["slo_gap_vs_static_pp"] for r in rows]
    misses, neg_met, _ = score(rows)
    return f"{line}, worst gap {max(gaps):+.3f} pp, SLO misses {misses}, meet all three {-neg_met} of {len(rows)}"


def folds(cands: list[tuple[str, list[dict]]]) -> dict[str, str]:
    """Each trace held out -> the candidate chosen on the others (the first of equal scores)."""
    traces = sorted({r["trace"] for _, rows in cands for r in rows})
    out = {}
    for held in traces:
        train = {label: [r for r in rows if r["trace"] != held] for label, rows in cands}
        out[held] = min(train, key=lambda k: score(train[k]))
    return out


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cands = [load(a) for a in sys.argv[1:]]
    traces = sorted({r["trace"] for _, rows in cands for r in rows})
    for trace in traces:
        for label, rows in cands:
            print(f"{SHORT.get(trace, trace):10} {label:>8}: {summary([r for r in rows if r['trace'] == trace])}")
    for label, rows in cands:
        print(f"{'all':10} {label:>8}: {summary(rows)}")
    print()
    held_rows = []
    for held, pick in folds(cands).items():
        test = [r for r in dict(cands)[pick] if r["trace"] == held]
        held_rows += test
        print(f"fold: held out {SHORT.get(held, held)} -> chosen on the other four: {pick}; held out: {summary(test)}")
    print(f"{'held out, all folds':>21}: {summary(held_rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
