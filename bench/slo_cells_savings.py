"""ServeGen savings from a ``bench/slo_oracle_cells.py`` output and a matrix references' cache, without
replaying anything: ours' node-hours are its x-oracle ratio times the cached oracle's (4 digits).

    .venv/bin/python bench/slo_cells_savings.py OUTPUT.txt CACHE.json[.gz] [--seeds 0,1,2]

Prints, over the ServeGen cells of the seeds asked that the cache holds: ours' and the rate
oracle's saving of always-on's node-hours, ours' share of the rate oracle's, and the worst SLO gap
over every cell of those seeds (e.g. the default budget at five groups, where the cache holds the
rate oracle of seeds 0-2: `bench/results/slo-cells-budget04-c5.txt`, `cv-references-c5.json.gz`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"(\S+)\s+s(\d+) ([\d.]+): gap ([+-][\d.]+)pp x([\d.]+)")
# slo_oracle_cells.py prints the trace's first 14 characters
FULL = {"servegen-m-sma": "servegen-m-small", "servegen-m-mid": "servegen-m-mid", "servegen-mm-im": "servegen-mm-image"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output")
    ap.add_argument("cache")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()
    seeds = {int(s) for s in args.seeds.split(",")}
    opener = gzip.open if args.cache.endswith(".gz") else open
    with opener(args.cache, "rt") as f:
        cache = json.load(f)
    base = ours = rate = 0.0
    worst, cells = 0.0, 0
    for line in Path(args.output).read_text().splitlines():
        m = ROW.match(line)
        if not m or int(m.group(2)) not in seeds:
            continue
        gap, x = float(m.group(4)), float(m.group(5))
        worst = max(worst, gap)
        full = FULL.get(m.group(1))
        refs = cache.get(f"{full}|{m.group(2)}|{float(m.group(3))}") if full else None
        if not refs or not refs.get("oracle_rate"):
            continue
        static = refs["static"]["node_hours"]
        base += static
        ours += static - x * refs["oracle"]["node_hours"]
        rate += static - refs["oracle_rate"]["node_hours"]
        cells += 1
    if not cells:
        print("no ServeGen cell of those seeds in the cache")
        return 1
    print(f"{cells} ServeGen cells: ours saves {100 * ours / base:.2f}% of always-on's node-hours, the rate oracle "
          f"{100 * rate / base:.2f}% (ours gets {100 * ours / rate:.0f}%); worst SLO gap of every cell {worst:.3f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
