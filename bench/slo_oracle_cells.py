"""The SLO and oracle bars of one policy on matrix cells, fast: ours against always-on and the oracle
only (no HPA or peers), two cells at a time. What docs/matrix.md's table of the core's steps came from.

    nice .venv/bin/python bench/slo_oracle_cells.py ROOT POLICY TRACES SEEDS PUS
    e.g. bench/slo_oracle_cells.py . policies/default.yaml \
        azure-2023-conv,mooncake-fast25-conversation,servegen-mm-image,servegen-m-mid,servegen-m-small 0,1,2 0.35,0.5,0.7

ROOT is the tree whose ``autoscaler`` is imported (a copy with a mechanism changed, to compare);
traces come from /work/shared/traces. One line per cell (SLO gap in pp, x oracle, capacity
misses) and the count of SLO misses. 45 cells: 100-650 s here, beside other work.
"""
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

root = sys.argv[1]
sys.path.insert(0, root)
sys.path.insert(0, root + "/bench")


def one(cell):
    from cv_matrix import trace_path

    from autoscaler.policy.loader import load_policy
    from autoscaler.sim.backtest import backtest, prepare_trace, reference_names
    name, seed, pu = cell
    pol = load_policy(sys.argv[2]).policy
    tr, f, _ = prepare_trace(trace_path(Path("/work/shared/traces"), name), "auto", pol, pu, seed)
    skip = frozenset(n for n in reference_names(pol) if n not in ("static", "oracle"))
    runs = backtest(tr, f, pol, compare=True, seed=seed, workers=1, skip=skip)
    o, s, orc = (runs[k].summary for k in ("ours", "static", "oracle"))
    return cell, round(100 * (s["slo_attainment"] - o["slo_attainment"]), 3), round(o["node_hours"] / orc["node_hours"], 4), o["capacity_misses"], s["capacity_misses"]

if __name__ == "__main__":
    traces = sys.argv[3].split(",")
    seeds = [int(x) for x in sys.argv[4].split(",")]
    pus = [float(x) for x in sys.argv[5].split(",")]
    cells = [(t, s, p) for t in traces for s in seeds for p in pus]
    t0 = time.time()
    with ProcessPoolExecutor(2) as ex:
        res = list(ex.map(one, cells))
    bad = 0
    for cell, gap, ratio, cm, sm in res:
        flag = ("SLO-MISS " if gap > 0.5 else "") + ("NH-MISS" if ratio > 1.10 else "")
        bad += gap > 0.5
        print(f"{cell[0][:14]:14} s{cell[1]} {cell[2]}: gap {gap:+.3f}pp x{ratio:.3f} capmiss {cm} (static {sm}) {flag}")
    print(f"SLO misses {bad} of {len(res)}; mean x oracle {sum(r[2] for r in res)/len(res):.4f}; {time.time()-t0:.0f}s")
