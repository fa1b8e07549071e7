"""How early ours would have to drain to escape a dominating setting, per dominated cell.

    .venv/bin/python bench/dominance_deadline.py MATRIX.json REFERENCES.json[.gz] [--nodes=6]

MATRIX.json is a ``bench/cv_matrix.py --json`` output; REFERENCES the references' cache it was judged
against (every setting of HPA and the peers, e.g. ``bench/results/cv-references-c3.json.gz``). For
each cell whose verdict names a dominating reference: the cheapest setting at an SLO attainment at
least ours' (less 0.0001, the rule of docs/interfaces.md, "HPA frontier"), and the latest minute at
which ours, holding always-on's SLO, would have to drain one group (two nodes) for good to come
within 0.995 x its node-hours. ``--nodes``: the ceiling's nodes (6: three groups of two). A one-hour trace whose deadline is within the first lead time
(10 minutes at the default start-up) cannot be met without a drain on no measured evidence.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cv_matrix import cell_key  # noqa: E402


def load(path: str) -> dict:
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--nodes=")]
    nodes = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--nodes=")), 6)
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows, cache = load(args[0])["results"], load(args[1])
    nodes_per_group = 2
    print("| cell | ours node-hours | cheapest setting at ours' SLO | its node-hours | trace minutes | one group off by minute |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if not r["verdict"].get("dominated_by"):
            continue
        refs = cache[cell_key(r["trace"], r["seed"], r["pu"])]
        static, ours = refs["static"], r["ours"]
        span = 60.0 * static["node_hours"] / nodes  # always-on runs every node the whole trace
        cands = [(k, v) for k, v in refs.items() if v and k not in ("oracle", "oracle_rate")
                 and v["slo_attainment"] >= ours["slo_attainment"] - 0.0001]
        name, best = min(cands, key=lambda kv: kv[1]["node_hours"])
        target = best["node_hours"] / 0.995
        by = span - 60.0 * (static["node_hours"] - target) / nodes_per_group
        print(f"| {r['trace']} s{r['seed']} {r['pu']} | {ours['node_hours']:.3f} | {name} | {best['node_hours']:.3f} | "
              f"{span:.1f} | {by:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
