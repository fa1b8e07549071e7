"""Cross-validation of the default policy on the five shared traces (issue 11).

    nice -n 10 .venv/bin/python bench/cv_matrix.py [--policy policies/default.yaml]
        [--grid "scaling.scale_down.stabilization_s=120,300" --grid "slo.capacity_miss_budget_pct=0.5,1"]
        [--traces DIR] [--seeds 0,1,2] [--pu 0.35,0.5,0.7] [--warmup-hours H] [--ceiling N] [--workers 2]
        [--cache FILE] [--json FILE]

Every cell is one trace at one seed and one peak utilisation; its three targets (docs/interfaces.md):
SLO attainment >= always-on's - 0.5 pp (the hard one, reported first), node-hours <= the rate oracle's
where it is defined (ServeGen; for recorded arrivals it is null and the target does not apply), not
dominated by any setting of the HPA sweep or of a peer's sweep (Knative KPA, AIBrix APA, Ray Serve,
Dynamo's planner; docs/peers.md). The references (always-on, HPA 0.5-0.9, the oracle, the rate
oracle, the peers' sweeps) do not depend on
the scaling knobs swept here, so they are replayed once per cell and kept in ``--cache`` (JSON; a
cell cached before the peers existed gets only the missing ones); only ours is replayed per
candidate.

Candidates: the policy file, and with ``--grid`` every combination of the listed values (dotted
field paths into the policy). Leave-one-trace-out: for each trace in turn, the candidate with the fewest
SLO misses on the other four traces (the SLO is the hard constraint), then the most cells meeting
all three targets there (ties: the lower mean node-hours / always-on's), is checked on the fifth
(out-of-sample). The candidate chosen on all five is the in-sample one. A
Markdown matrix of both goes to stdout; every number to ``--json``.

``--warmup-hours H`` (default 0: the cold-start matrix) replays each trace's first H hours to build
every controller's memory and scores only what follows (``simulate --warmup-hours``); its cells are
cached apart from the cold ones. A trace shorter than H (as replayed) is left out with a note.

``--ceiling N`` runs the same policy on a fleet of N groups (``fleet.ceiling_groups`` N, the group
list extended with groups shaped like the last one; the floor unchanged): the matrix at other
fleet sizes. Its references go to a cache of their own (``out/cv-references-cN.json`` unless
``--cache`` is given), since every reference depends on the fleet.

Each row also names the references (always-on, any HPA setting, any peer setting; not the oracle)
that meet all three targets of the cell themselves, judged as ours is ("met by a reference"), and
the summary counts the cells some reference meets: what a sweep of the known controllers reaches.

Each row also shows the session-move misses (docs/interfaces.md) of ours and of the oracle: the
misses a drain causes by moving conversations off their cache, which more groups would not prevent.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from autoscaler.policy.model import Policy  # noqa: E402
from autoscaler.sim.backtest import (  # noqa: E402
    HPA_TARGETS,
    PEER_NAMES,
    applies,
    backtest,
    peers_frontiers,
    prepare_trace,
    reference_json,
    reference_names,
    verdict,
)

TRACE_NAMES = ("azure-2023-conv", "mooncake-fast25-conversation", "servegen-m-small", "servegen-m-mid",
               "servegen-mm-image")
SHORT = {"azure-2023-conv": "azure-conv", "mooncake-fast25-conversation": "mooncake",
         "servegen-m-small": "m-small", "servegen-m-mid": "m-mid", "servegen-mm-image": "mm-image"}


def trace_path(root: Path, name: str) -> str:
    d = root / name
    files = [p for p in d.iterdir() if p.suffix in (".csv", ".jsonl")]
    if name.startswith("servegen") or len(files) != 1:
        return str(d)
    return str(files[0])


def with_ceiling(data: dict, n: int) -> dict:
    """The policy ``data`` on a fleet of ``n`` groups: the group list cut or extended with groups
    shaped like its last one (names g<k>, made-up addresses), ``ceiling_groups`` n."""
    out = copy.deepcopy(data)
    fleet = out["fleet"]
    groups = fleet["groups"][:n]
    size = int(fleet.get("group_size_nodes", 2))
    while len(groups) < n:
        k = len(groups) + 1
        groups.append({"name": f"g{k}", "worker_url": f"http://10.0.1.{k}:30000",
                       "nodes": [{"name": f"node-{k}-{j}", "address": f"10.0.2.{size * k + j}"} for j in range(size)]})
    fleet["groups"], fleet["ceiling_groups"] = groups, n
    Policy.model_validate(out)
    return out


def set_path(data: dict, dotted: str, value: Any) -> None:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value


def candidates(base: dict, grid: list[str]) -> list[tuple[str, dict]]:
    axes = []
    for g in grid:
        key, values = g.split("=", 1)
        axes.append([(key, yaml.safe_load(v)) for v in values.split(",")])
    out = []
    for combo in itertools.product(*axes) if axes else [()]:
        data = copy.deepcopy(base)
        for key, value in combo:
            set_path(data, key, value)
        Policy.model_validate(data)  # reject a bad grid before any replay
        out.append((", ".join(f"{k}={v}" for k, v in combo) or "policy file", data))
    return out


_traces: dict[tuple[str, int, float], Any] = {}


def _prepared(path: str, policy: Policy, seed: int, pu: float):
    key = (path, seed, pu)
    if key not in _traces:
        if len(_traces) > 2:
            _traces.clear()
        _traces[key] = prepare_trace(path, "auto", policy, pu, seed)
    return _traces[key]


def run_cell(job: tuple) -> dict[str, Any]:
    cand_i, data, path, trace, seed, pu, have_refs, warmup_s = job  # have_refs: None = no references to run
    policy = Policy.model_validate(data)
    started = time.perf_counter()
    tr, factor, _ = _prepared(path, policy, seed, pu)
    need_refs = have_refs is not None
    runs = backtest(tr, factor, policy, compare=need_refs, seed=seed, workers=1, sweep=True,
                    skip=frozenset(have_refs or ()), warmup_s=warmup_s)
    out = {"candidate": cand_i, "trace": trace, "seed": seed, "pu": pu, "ours": runs["ours"].summary,
           "wall_s": round(time.perf_counter() - started, 2)}
    if need_refs:
        out["refs"] = {name: r.summary for name, r in runs.items() if name != "ours"}
        if not applies("oracle_rate", tr):
            out["refs"]["oracle_rate"] = None  # not defined for recorded arrivals: cached as such
    return out


WARMUP_S = 0.0  # set by main() from --warmup-hours: part of every cell's cache key when above 0


def cell_key(trace: str, seed: int, pu: float) -> str:
    return f"{trace}|{seed}|{pu}" + (f"|warmup {WARMUP_S:g} s" if WARMUP_S > 0 else "")


def judge(ours: dict, refs: dict, policy: Policy) -> dict:
    sweep = [{**refs[f"hpa@{t}"], "target_utilization": t} for t in HPA_TARGETS]
    return verdict(ours, refs["static"], refs["oracle"], sweep, peers_frontiers(reference_json(refs, policy), policy),
                   refs.get("oracle_rate"))


def met_by_references(refs: dict, policy: Policy) -> list[str]:
    """The causal references (always-on, every HPA setting, every peer setting: all but the
    clairvoyant oracle) that meet all three targets of the cell themselves, judged exactly as ours
    is. An empty list: no controller in the comparison, at any of its settings, meets the cell,
    which bounds what a sweep of known controllers reaches there (not what any controller could)."""
    return reference_outcomes(refs, policy)[0]


def reference_outcomes(refs: dict, policy: Policy) -> tuple[list[str], list[str]]:
    """(the references that meet the cell, ``met_by_references``; those more than 0.5 pp below
    always-on's SLO there), from one verdict each."""
    verdicts = judge_references(refs, policy)
    return ([n for n, v in verdicts.items() if v["meets_targets"]],
            [n for n, v in verdicts.items() if not v["slo_within_0_5pp_of_static"]])


def judge_references(refs: dict, policy: Policy) -> dict[str, dict]:
    """Every causal reference's verdict on the cell (all but the oracle), as ``judge`` gives ours."""
    return {name: judge(run, refs, policy) for name, run in refs.items()
            if name not in ("oracle", "oracle_rate") and run is not None}


def best_single_reference(rows: list[dict]) -> tuple[str, int, int] | None:
    """The one reference setting (as ours is one policy) that meets the most cells: (name, cells,
    its SLO misses: cells more than 0.5 pp below always-on, ``slo_missed_by``), fewer SLO misses
    first on a tie."""
    names = {name for r in rows for name in r["refs"] if name not in ("oracle", "oracle_rate")}
    scored = []
    for name in names:
        cells = sum(name in r["met_by_references"] for r in rows)
        misses = sum(name in r["slo_missed_by"] for r in rows)
        scored.append((-cells, misses, name))
    if not scored:
        return None
    cells, misses, name = min(scored)
    return name, -cells, misses


PEER_LABEL = {"kpa": "KPA", "apa": "APA", "ray_serve": "Ray", "dynamo_planner": "Dynamo"}


def peer_cell(v: dict, peer: str) -> str:
    """'ok', or 'dominated (setting)' with the cheapest dominating setting of that peer."""
    d = v["peer_dominating"].get(peer)
    if not d:
        return "ok"
    knob = next(k for k in d if k not in ("slo_attainment", "node_hours", "on_line_between"))
    at = d[knob] if d[knob] is not None else "/".join(f"{x:g}" for x in d["on_line_between"])
    return f"dominated ({at:g})" if isinstance(at, float) else f"dominated ({at})"


def savings(r: dict) -> dict[str, float | None]:
    """Saving of always-on's node-hours, in %, of ours, the oracle and the rate oracle (None where the
    rate oracle is not defined) in one cell."""
    base = r["refs"]["static"]["node_hours"]

    def pct(run: dict | None) -> float | None:
        return None if run is None or not base else 100.0 * (base - run["node_hours"]) / base
    return {"ours": pct(r["ours"]), "oracle": pct(r["refs"]["oracle"]), "oracle_rate": pct(r["refs"].get("oracle_rate"))}


def share(ours: float | None, ref: float | None) -> str:
    """(always-on - ours) / (always-on - reference), as a percentage: the share of the reference's
    saving that ours gets (docs/interfaces.md); '-' where the reference saves nothing or is undefined."""
    if ours is None or ref is None or ref <= 0:
        return "-"
    return f"{100.0 * ours / ref:.0f}%"


def summary_of_savings(rows: list[dict]) -> str:
    """The totals the matrix reports: node-hours saved summed over cells (all cells, and the cells
    where the rate oracle is defined), by ours, the oracle and the rate oracle, and the shares."""
    def total(sel: list[dict]) -> dict[str, float]:
        base = sum(r["refs"]["static"]["node_hours"] for r in sel)
        out = {"base": base, "ours": base - sum(r["ours"]["node_hours"] for r in sel),
               "oracle": base - sum(r["refs"]["oracle"]["node_hours"] for r in sel)}
        if all(r["refs"].get("oracle_rate") for r in sel):
            out["oracle_rate"] = base - sum(r["refs"]["oracle_rate"]["node_hours"] for r in sel)
        return out

    lines = []
    for label, sel in (("all cells", rows),
                       ("cells with a rate oracle (ServeGen)", [r for r in rows if r["refs"].get("oracle_rate")])):
        if not sel:
            continue
        t = total(sel)
        line = (f"saved over {label} ({len(sel)}): ours {100 * t['ours'] / t['base']:.2f}% of always-on's node-hours, "
                f"the oracle {100 * t['oracle'] / t['base']:.2f}% (ours gets {share(t['ours'], t['oracle'])} of it)")
        if "oracle_rate" in t:
            line += (f", the rate oracle {100 * t['oracle_rate'] / t['base']:.2f}% "
                     f"(ours gets {share(t['ours'], t['oracle_rate'])} of it)")
        gaps = [r["verdict"]["slo_gap_vs_static_pp"] for r in sel]
        line += f"; worst SLO gap {max(gaps):+.3f} pp"
        lines.append(line)
    return "\n".join(lines)


def score(rows: list[dict]) -> tuple:
    """SLO first (docs/interfaces.md, "The order of the targets": a cell more than 0.5 pp below
    always-on's SLO is a worse failure than one that misses node-hours): the fewest SLO misses, then
    the most cells meeting all three targets, then the lowest mean node-hours / always-on's."""
    slo_misses = sum(not r["verdict"]["slo_within_0_5pp_of_static"] for r in rows)
    passed = sum(r["verdict"]["meets_targets"] for r in rows)
    mean_ratio = sum(r["ours"]["node_hours"] / r["refs"]["static"]["node_hours"] for r in rows) / max(1, len(rows))
    return (slo_misses, -passed, mean_ratio)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default=str(ROOT / "policies/default.yaml"))
    ap.add_argument("--grid", action="append", default=[], help="FIELD=V1,V2 (dotted path); repeatable")
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--only", default="", help="comma-separated trace folders (default: all five)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pu", default="0.35,0.5,0.7")
    ap.add_argument("--warmup-hours", type=float, default=0.0,
                    help="replay each trace's first H hours unscored, to build every controller's memory (default 0)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ceiling", type=int, default=None, help="the fleet's ceiling in groups (default: the policy's)")
    ap.add_argument("--cache", default=None, help="the references' cache (default out/cv-references.json, "
                                                  "out/cv-references-cN.json with --ceiling N)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    global WARMUP_S
    if not args.warmup_hours >= 0:
        ap.error(f"--warmup-hours: {args.warmup_hours:g} must be 0 or more")
    WARMUP_S = args.warmup_hours * 3600.0

    base = yaml.safe_load(Path(args.policy).read_text())
    if args.ceiling is not None:
        base = with_ceiling(base, args.ceiling)
    if args.cache is None:
        args.cache = str(ROOT / ("out/cv-references.json" if args.ceiling is None
                                 else f"out/cv-references-c{args.ceiling}.json"))
    cands = candidates(base, args.grid)
    root = Path(args.traces)
    # The five shared traces, or every folder under another --traces (bench/stress_traces.py's shapes).
    names = TRACE_NAMES if all((root / t).is_dir() for t in TRACE_NAMES) else \
        tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    traces = [t for t in names if not args.only or t in args.only.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    pus = [float(p) for p in args.pu.split(",")]
    cache_path = Path(args.cache)
    cache: dict[str, dict] = json.loads(cache_path.read_text()) if cache_path.exists() else {}

    base_policy = Policy.model_validate(cands[0][1])
    wanted = set(reference_names(base_policy, sweep=True))
    jobs = []
    for trace in traces:
        path = trace_path(root, trace)
        for seed in seeds:
            for pu in pus:
                if WARMUP_S > 0:
                    tr = _prepared(path, base_policy, seed, pu)[0]
                    if WARMUP_S >= tr.span_s[1] - tr.span_s[0]:
                        print(f"{trace} seed {seed} pu {pu}: spans {(tr.span_s[1] - tr.span_s[0]) / 3600:.3g} h as "
                              f"replayed, not more than the warm-up: left out", file=sys.stderr)
                        continue
                have = set(cache.get(cell_key(trace, seed, pu), {}))
                have_refs = None if wanted <= have else frozenset(have & wanted)
                for i, (_, data) in enumerate(cands):
                    jobs.append((i, data, path, trace, seed, pu, have_refs if i == 0 else None, WARMUP_S))
    # The longest traces first, so that no worker is left with a 14-day replay at the end.
    jobs.sort(key=lambda j: (not j[3].endswith(("m-small", "m-mid")), j[6] is None))
    started = time.perf_counter()
    results: list[dict] = []
    ctx = mp.get_context("fork")
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        for n, res in enumerate(pool.map(run_cell, jobs), 1):
            if "refs" in res:
                cache.setdefault(cell_key(res["trace"], res["seed"], res["pu"]), {}).update(res.pop("refs"))
                cache_path.parent.mkdir(parents=True, exist_ok=True)
                cache_path.write_text(json.dumps(cache))
            results.append(res)
            print(f"[{n}/{len(jobs)} {time.perf_counter() - started:.0f} s] {SHORT.get(res['trace'], res['trace'])} seed {res['seed']} "
                  f"pu {res['pu']} cand {res['candidate']}: {res['wall_s']} s", file=sys.stderr, flush=True)
    for r in results:
        r["refs"] = cache[cell_key(r["trace"], r["seed"], r["pu"])]
        r["verdict"] = judge(r["ours"], r["refs"], base_policy)
        r["met_by_references"], r["slo_missed_by"] = reference_outcomes(r["refs"], base_policy)

    by_cand = {i: [r for r in results if r["candidate"] == i] for i in range(len(cands))}
    chosen_all = min(by_cand, key=lambda i: score(by_cand[i]))
    folds = {}
    for held in traces:
        train = {i: [r for r in rows if r["trace"] != held] for i, rows in by_cand.items()}
        pick = min(train, key=lambda i: score(train[i]))
        folds[held] = pick

    print(f"candidates: {len(cands)}; chosen on all five (in-sample): #{chosen_all} {cands[chosen_all][0]}")
    for held, pick in folds.items():
        print(f"fold: held out {SHORT.get(held, held)} -> chosen on the other four: #{pick} {cands[pick][0]}")
    print()
    print("| trace | seed | peak use | ours saves % | rate oracle saves % | oracle saves % | share of rate oracle's "
          "| share of oracle's | x rate oracle | gap pp | capacity misses (ours / always-on) "
          "| session-move misses (ours / oracle) | HPA | " + " | ".join(PEER_LABEL[p] for p in PEER_NAMES)
          + " | met by a reference | in-sample | out-of-sample |")
    print("|---" * (17 + len(PEER_NAMES)) + "|")
    for trace in traces:
        for seed in seeds:
            for pu in pus:
                ins = next((r for r in by_cand[chosen_all] if (r["trace"], r["seed"], r["pu"]) == (trace, seed, pu)),
                           None)
                if ins is None:  # left out: shorter than the warm-up
                    continue
                oos = next(r for r in by_cand[folds[trace]] if (r["trace"], r["seed"], r["pu"]) == (trace, seed, pu))
                v, refs = ins["verdict"], ins["refs"]
                sv = savings(ins)

                def mark(x):
                    w = x["verdict"]
                    miss = [n for n, ok in (("SLO", w["slo_within_0_5pp_of_static"]),
                                            ("rate-oracle", w["within_rate_oracle"] is not False),
                                            ("HPA", not w["dominated_by_hpa"])) if not ok]
                    miss += [PEER_LABEL[p] for p in PEER_NAMES if w["peer_dominating"].get(p)]
                    return "meets" if not miss else "MISS " + "+".join(miss)

                def pct(x):
                    return "-" if x is None else f"{x:.2f}"

                print(f"| {SHORT.get(trace, trace)} | {seed} | {pu} | {pct(sv['ours'])} | "
                      + ("- (recorded arrivals)" if sv["oracle_rate"] is None else pct(sv["oracle_rate"]))
                      + f" | {pct(sv['oracle'])} | {share(sv['ours'], sv['oracle_rate'])} | {share(sv['ours'], sv['oracle'])} "
                      f"| {'-' if v['node_hours_vs_oracle_rate'] is None else format(v['node_hours_vs_oracle_rate'], '.3f')} "
                      f"| {v['slo_gap_vs_static_pp']:+.3f} | {ins['ours']['capacity_misses']:,} / "
                      f"{refs['static']['capacity_misses']:,} | {ins['ours'].get('session_move_misses', '-')} / "
                      f"{refs['oracle'].get('session_move_misses', '-')} | {'dominated' if v['dominated_by_hpa'] else 'ok'} "
                      + "".join(f"| {peer_cell(v, p)} " for p in PEER_NAMES)
                      + f"| {', '.join(ins['met_by_references'][:3]) or 'none'}"
                      + (f" (+{len(ins['met_by_references']) - 3})" if len(ins["met_by_references"]) > 3 else "")
                      + f" | {mark(ins)} | {mark(oos)}"
                      + ("" if oos is ins or oos["candidate"] == ins["candidate"]
                         else f" (#{oos['candidate']}: {pct(savings(oos)['ours'])}% saved, "
                              f"{oos['verdict']['slo_gap_vs_static_pp']:+.3f} pp)") + " |")
    print()
    print(summary_of_savings(by_cand[chosen_all]))
    total = len(by_cand[chosen_all])
    met = sum(r["verdict"]["meets_targets"] for r in by_cand[chosen_all])
    oos_met = sum(r["verdict"]["meets_targets"] for held, pick in folds.items() for r in by_cand[pick]
                  if r["trace"] == held)
    slo_in = sum(not r["verdict"]["slo_within_0_5pp_of_static"] for r in by_cand[chosen_all])
    slo_oos = sum(not r["verdict"]["slo_within_0_5pp_of_static"] for held, pick in folds.items() for r in by_cand[pick]
                  if r["trace"] == held)
    print(f"\nin-sample: {met} of {total} cells meet all three targets; out-of-sample: {oos_met} of {total}")
    print(f"SLO misses (more than 0.5 pp below always-on): in-sample {slo_in} of {total}; out-of-sample {slo_oos}")
    reachable = [r for r in by_cand[chosen_all] if r["met_by_references"]]
    print(f"cells that some setting of always-on, HPA or a peer meets all three targets of: {len(reachable)} of "
          f"{total} (ours in-sample meets {sum(r['verdict']['meets_targets'] for r in reachable)} of them, "
          f"and {met - sum(r['verdict']['meets_targets'] for r in reachable)} that none of them meets)")
    best = best_single_reference(by_cand[chosen_all])
    if best:
        name, cells, slo_misses = best
        print(f"the best single setting of one reference: {name}, {cells} of {total} cells, {slo_misses} SLO misses "
              f"(ours: {met}, {slo_in})")
    print(f"wall {time.perf_counter() - started:.0f} s, {len(jobs)} replays", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"candidates": [c[0] for c in cands], "chosen": chosen_all,
                                               "folds": folds, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
