"""The backtest: the fleet model's arithmetic on handmade traces, the references, the command."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from core_helpers import make_policy

from autoscaler.policy import load_policy
from autoscaler.sim.backtest import (
    backtest,
    hpa_dominating,
    hpa_frontier_node_hours,
    prepare_trace,
    reference_names,
    summarise,
    verdict,
)
from autoscaler.sim.controllers import (
    HpaController,
    OracleController,
    StaticController,
    oracle_schedule,
)
from autoscaler.sim.engine import simulate
from autoscaler.sim.traces import Trace

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"
MOONCAKE = ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl"
SERVEGEN = ROOT / "examples/traces/servegen-m-small"


def handmade(t, inp, out, session=None, blocks=None, span=None) -> Trace:
    t = np.asarray(t, dtype=float)
    return Trace(
        format="csv", path="handmade", start_epoch_s=1_767_571_200.0, t_s=t,
        input_tokens=np.asarray(inp, dtype=np.int64), output_tokens=np.asarray(out, dtype=np.int64),
        session=np.asarray(session if session is not None else [-1] * len(t), dtype=np.int64),
        prefix_blocks=blocks, span_s=span or (float(t[0]), float(t[-1])), requests_read=len(t), bad_rows=0,
        gap_windows=[],
    )


class Fixed:
    """Drain the named groups at the first tick at or after ``at``, then do nothing."""

    def __init__(self, names, at=15.0, period_s=15.0):
        self.drain, self.at, self.period_s = list(names), at, period_s

    def tick(self, now, signals, fleet):
        if now < self.at:
            return [], []
        names, self.drain = self.drain, []
        return [], names

    def on_ready(self, name, startup_s):
        pass


ONE_GROUP = dict(fleet={"ceiling_groups": 1, "floor_groups": 1})


def test_slots_queue_and_ttft_arithmetic():
    # One group, 6 slots. 7 requests at t=0 with 2,500 input tokens (1 s prefill at 2,500/s) and
    # 20 output tokens (1 s decode at 20/s): six start at once (TTFT 1 s, slot held 2 s); the
    # seventh waits for the first free slot at 2 s: TTFT = 2 + 1 = 3 s. A request at t=10 finds
    # the group idle: TTFT 1 s.
    policy = make_policy(**ONE_GROUP)
    trace = handmade([0] * 7 + [10], [2500] * 8, [20] * 8)
    r = simulate(trace, policy, StaticController(policy))
    assert r.ttft_s.tolist() == [1.0] * 6 + [3.0, 1.0]
    assert r.queue_s.tolist() == [0.0] * 6 + [2.0, 0.0]
    # node-hours: 1 group of 2 nodes over the 10 s span = 2 x 10 / 3600
    assert r.node_hours(2) == pytest.approx(20 / 3600)


def test_session_cache_hit_and_loss_on_drain():
    # Session 5 runs 1,000 + 100 tokens on its group; its next request (2,000 input) re-uses the
    # 1,100 cached tokens: prefill (2000 - 1100) / 2500 = 0.36 s instead of 0.8 s.
    policy = make_policy(**ONE_GROUP)
    trace = handmade([0, 100], [1000, 2000], [100, 10], session=[5, 5])
    r = simulate(trace, policy, StaticController(policy))
    assert r.ttft_s.tolist() == pytest.approx([0.4, 0.36])


def test_a_drain_that_moves_a_session_counts_its_miss_as_a_session_move_miss():
    # Two groups, prefill 2,500 tokens/s, decode 20/s, target 3 s. Sessions 5 and 6 each run a
    # first turn of 1,000 + 10 tokens on g1 (idle groups: the first takes it). The controller
    # drains g1 at 15 s; it is empty and stops. Then, on g2 alone:
    # - session 5's next turn, 10,000 input tokens: a full prefill of 10,000 / 2,500 = 4 s, a miss
    #   without queue wait; with the 1,010 tokens g1 held, (10,000 - 1,010) / 2,500 = 3.596 s:
    #   a miss anyway, so not a session-move miss;
    # - session 6's, 8,000 tokens: 3.2 s (a miss); kept, (8,000 - 1,010) / 2,500 = 2.796 s (met):
    #   a session-move miss;
    # - a request of no session, 8,000 tokens: 3.2 s, a miss of its own, not moved.
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1})
    trace = handmade([0, 10, 100, 200, 300], [1000, 1000, 10000, 8000, 8000], [10] * 5, session=[5, 6, 5, 6, -1])
    r = simulate(trace, policy, Fixed(["g1"]))
    assert r.ttft_s.tolist() == pytest.approx([0.4, 0.4, 4.0, 3.2, 3.2])
    assert r.moved.tolist() == [False, False, False, True, False]
    s = summarise(r, policy, 1.0, 0.0)
    assert s["session_move_misses"] == 1 and s["capacity_misses"] == 0
    # Without the drain both sessions stay on g1 and hit its cache: 3.596 s and 2.796 s, none moved.
    kept = simulate(trace, policy, StaticController(policy))
    assert kept.ttft_s[2:4].tolist() == pytest.approx([3.596, 2.796])
    assert not kept.moved.any()


def test_a_drained_groups_prefix_blocks_count_as_moved():
    # Request 0 (blocks 1-12: 6,144 tokens, 2.46 s prefill) runs on g1; g1 is drained at 15 s. Request
    # 1 shares all 12 blocks and adds 4 (8,192 tokens): on g2, a full prefill of 8,192 / 2,500 =
    # 3.28 s > 3 s; with g1's 12 blocks it would be (8,192 - 6,144) / 2,500 = 0.82 s: a session-move
    # miss. Request 2 (blocks 50-65, no one ever held them: 3.28 s) misses for itself.
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1})
    blocks = [tuple(range(1, 13)), tuple(range(1, 17)), tuple(range(50, 66))]
    trace = handmade([0, 100, 200], [6144, 8192, 8192], [10, 10, 10], blocks=blocks)
    r = simulate(trace, policy, Fixed(["g1"]))
    assert r.ttft_s.tolist() == pytest.approx([6144 / 2500, 8192 / 2500, 8192 / 2500])
    assert r.moved.tolist() == [False, True, False]
    assert summarise(r, policy, 1.0, 0.0)["session_move_misses"] == 1


def test_prefix_blocks_route_to_the_group_that_holds_them():
    # Two groups. Request 0 (blocks 1,2,3; 1,536 tokens) goes to the least-loaded group g1.
    # Request 1 shares the prefix (blocks 1,2,3,4; 2,048 tokens): 3 of 4 blocks cached on g1,
    # 1,536 / 2,048 = 0.75 > 0.5 -> g1, prefill (2048 - 1536) / 2500 = 0.2048 s.
    # Request 2 (blocks 9; no match) goes to the least-loaded group: g2 (g1 still busy).
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1})
    trace = handmade([0, 1, 2], [1536, 2048, 512], [200, 10, 10], blocks=[(1, 2, 3), (1, 2, 3, 4), (9,)])
    r = simulate(trace, policy, StaticController(policy))
    assert r.ttft_s.tolist() == pytest.approx([1536 / 2500, 512 / 2500, 512 / 2500])


def test_drain_waits_for_in_flight_then_stops():
    # Requests at t=0 go one to each group (least loaded). g2 is drained at the tick at 15 s with
    # 40 s of decode still to do (1,000 tokens at 20/s from t = 0.2 s); it stops at the first
    # tick after the request ends at 50.2 s: 60 s. Nothing is cut.
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1})
    trace = handmade([0, 0, 90], [500, 500, 500], [10, 1000, 10])
    r = simulate(trace, policy, Fixed(["g2"]))
    assert r.scale_downs == 1 and r.requests_cut_by_drain == 0
    assert r.group_intervals["g2"] == [(0.0, 60.0)]
    assert r.ttft_s[2] == pytest.approx(0.2)  # the request at 90 s went to g1
    assert r.group_intervals["g1"] == [(0.0, 90.0)]


def test_drain_timeout_cuts_and_counts():
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1}, drain={"timeout_s": 5})
    # g1 least loaded takes request 0, g2 takes request 1 (1,000 output tokens: 50 s of decode).
    trace = handmade([0, 0, 60], [500, 500, 500], [10, 1000, 10])
    r = simulate(trace, policy, Fixed(["g2"]))
    assert r.requests_cut_by_drain == 1 and r.cut.tolist() == [False, True, False]
    assert r.group_intervals["g2"] == [(0.0, 20.0)]  # drained at 15 s, stopped at the 5 s deadline


def test_oracle_schedule_from_demand():
    # Requests of 10 s service (0 input, 200 output at 20/s). Minute 0: 3 at once -> 1 group;
    # minute 20: 14 at once -> ceil(14 / 6) = 3 groups; minute 40 (2,430 s): 1.
    policy = make_policy()
    t = [0, 0, 0] + [1200] * 14 + [2430]
    trace = handmade(t, [0] * len(t), [200] * len(t))
    demand, needed = oracle_schedule(trace, policy)
    assert demand[0] == 3 and demand[20] == 14 and demand[40] == 1
    assert needed[0] == 1 and needed[20] == 3 and needed[40] == 1
    oracle = OracleController(trace, policy)
    # g2, g3 are on at the start (ceiling ready) and not needed until minute 20: they drain at
    # minute 1 and start again 600 s before minute 20 (t = 600); then drain at minute 21.
    assert oracle.actions == [(60.0, "drain", "g2"), (60.0, "drain", "g3"), (600.0, "start", "g2"),
                              (600.0, "start", "g3"), (1260.0, "drain", "g2"), (1260.0, "drain", "g3")]
    r = simulate(trace, policy, oracle)
    assert float(r.ttft_s.max()) == 0.0  # every request found a free slot


def _hpa_tick(hpa, now, phases, per_group_load):
    from autoscaler.core.types import FleetState, GroupSignals, GroupState, Phase, SignalSnapshot

    names = ("g1", "g2", "g3")
    fleet = FleetState({n: GroupState(n, Phase(p), 0.0) for n, p in zip(names, phases)})
    groups = {n: GroupSignals(running=min(per_group_load, 6), queued=max(per_group_load - 6, 0), kv_usage=0.1)
              for n, p in zip(names, phases) if p == "ready"}
    return hpa.tick(now, SignalSnapshot(now, groups, GroupSignals()), fleet)


def test_hpa_ratio_tolerance_and_stabilisation():
    policy = make_policy()
    # Target 0.7 x 6 = 4.2 per group.
    hpa = HpaController(policy, 0.7, 0.0)
    # metric 4.5: ratio 4.5 / 4.2 = 1.07, within the 10% tolerance -> nothing
    assert _hpa_tick(hpa, 15, ("ready", "ready", "off"), 4.5) == ([], [])
    # metric 6: ratio 1.43 -> desired ceil(2 x 1.43) = 3 -> start one group now
    assert _hpa_tick(hpa, 30, ("ready", "ready", "off"), 6.0) == (["g3"], [])
    hpa = HpaController(policy, 0.7, 0.0)
    # metric 2 on 3 groups: ratio 0.48 -> desired ceil(3 x 0.48) = 2; the window starts filled with
    # the initial 3, so no drain until 300 s have passed...
    for now in range(15, 300, 15):
        assert _hpa_tick(hpa, now, ("ready", "ready", "ready"), 2.0) == ([], []), now
    # ...then one group drains (the least loaded; all equal -> the last in policy order)
    assert _hpa_tick(hpa, 300, ("ready", "ready", "ready"), 2.0) == ([], ["g3"])


def test_hpa_frontier_interpolation():
    sweep = [{"slo_attainment": 0.90, "node_hours": 100.0}, {"slo_attainment": 0.95, "node_hours": 150.0},
             {"slo_attainment": 0.97, "node_hours": 170.0}]
    assert hpa_frontier_node_hours(0.925, sweep) == pytest.approx(125.0)  # halfway 100 -> 150
    assert hpa_frontier_node_hours(0.99, sweep) == 170.0  # above every point: the most expensive
    assert hpa_frontier_node_hours(0.80, sweep) == 100.0


SWEEP = [{"target_utilization": 0.5, "slo_attainment": 0.96, "node_hours": 140.0},
         {"target_utilization": 0.7, "slo_attainment": 0.94, "node_hours": 100.0},
         {"target_utilization": 0.9, "slo_attainment": 0.90, "node_hours": 80.0}]


@pytest.mark.parametrize("slo, nh, expected", [
    # a point with SLO >= s - 0.0001 and node-hours < 0.995 n: 0.94 >= 0.94005 - 0.0001, 100 < 0.995 x 110
    (0.94005, 110.0, (0.94, 100.0, 0.7, None)),
    # the same point, costing 100 >= 0.995 x 100.4 = 99.898: not cheaper by enough; the line 0.94-0.96
    # at 0.94005 is 100 + 40 x 0.0025 = 100.1 >= 99.898 too: not dominated
    (0.94005, 100.4, None),
    # a tie on SLO with fewer HPA node-hours is a loss: 0.96 at 140 against ours 0.96 at 150 (140 < 149.25)
    (0.96, 150.0, (0.96, 140.0, 0.5, None)),
    # only the line: between (0.94, 100) and (0.96, 140) at 0.95 lies 120 < 0.995 x 125 = 124.375;
    # no single point (0.96 costs 140; 0.94 < 0.9499)
    (0.95, 125.0, (0.95, 120.0, None, [0.7, 0.5])),
    # the line at 0.95 (120) is not below 0.995 x 120.5 = 119.8975: not dominated
    (0.95, 120.5, None),
    # above every HPA point: nothing reaches our SLO
    (0.97, 100.0, None),
    # below every point, the cheapest point that reaches our SLO: 0.90 at 80 < 0.995 x 90
    (0.85, 90.0, (0.90, 80.0, 0.9, None)),
    # several dominate: the cheapest is reported (0.90 at 80, not 0.94 at 100 or the line)
    (0.89, 200.0, (0.90, 80.0, 0.9, None)),
])
def test_hpa_dominance_table(slo, nh, expected):
    got = hpa_dominating(slo, nh, SWEEP)
    if expected is None:
        assert got is None
    else:
        s, n, target, between = expected
        assert got["slo_attainment"] == pytest.approx(s)
        assert got["node_hours"] == pytest.approx(n)
        assert got["target_utilization"] == target and got["on_line_between"] == between


def test_capacity_misses_count_queue_wait_misses_and_cuts():
    # One group, 6 slots, target 3 s. Eight requests at t=0, 2,500 input tokens (1 s prefill), 20 output
    # (1 s decode): six start at once (TTFT 1 s); the 7th and 8th wait 2 s (TTFT 3 s: met). A 9th at
    # t=0 with 10,000 input tokens (4 s prefill) waits 2 s too: TTFT 6 s, and 6 - 2 = 4 s > 3 s, so it
    # would have missed anyway: not a capacity miss. Eight more at t=20 (5 s prefill each, 12,500
    # tokens): six miss on their own prefill; the last two wait 6 s: TTFT 11 s, 11 - 6 = 5 > 3: not
    # capacity either. Then 13 at t=100 with 2,500 tokens: 6 run (TTFT 1), 6 wait 2 s (TTFT 3, met),
    # the 13th waits 4 s: TTFT 5 s > 3 but 5 - 4 = 1 <= 3: one capacity miss.
    policy = make_policy(**ONE_GROUP)
    t = [0] * 9 + [20] * 8 + [100] * 13
    inp = [2500] * 8 + [10000] + [12500] * 8 + [2500] * 13
    trace = handmade(t, inp, [20] * len(t))
    r = simulate(trace, policy, StaticController(policy))
    out = summarise(r, policy, 1.0, 0.0)
    assert out["capacity_misses"] == 1
    # a drain that cuts counts each cut request once, whatever its TTFT
    policy2 = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1}, drain={"timeout_s": 20})
    r2 = simulate(handmade([0, 0, 90], [500, 500, 500], [10, 830, 10]), policy2, Fixed(["g2"]))
    assert summarise(r2, policy2, 1.0, 0.0)["capacity_misses"] == 1


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_simulate_json_keys_compare_timeline_and_plot(tmp_path):
    tl, plot = tmp_path / "tl.csv", tmp_path / "p.html"
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--compare", "--json",
                "--timeline-out", str(tl), "--plot", str(plot))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    keys = {"requests", "load_scale", "node_hours", "baseline_node_hours", "savings_pct", "slo_attainment",
            "capacity_misses", "session_move_misses", "ttft_p50_s", "ttft_p99_s", "scale_ups", "scale_downs",
            "requests_cut_by_drain", "wall_s"}
    assert keys <= set(out)
    assert set(out["trace"]) >= {"format", "requests_read", "bad_rows", "gap_windows"}
    assert out["trace"]["format"] == "azure" and out["trace"]["requests_read"] == 19366
    assert set(out["model"]) >= {"prefill_tokens_per_s", "decode_tokens_per_s", "startup_s", "requests_per_group",
                                 "slo_ttft_s"}
    ref = out["reference"]
    assert set(ref) == {"static", "hpa", "hpa_sweep", "oracle", "oracle_rate", "kpa", "apa", "ray_serve",
                        "dynamo_planner"}
    assert ref["oracle_rate"] is None  # recorded arrivals: no rate windows to draw again
    for r in (ref["static"], ref["hpa"], ref["oracle"], *ref["hpa_sweep"]):
        assert keys <= set(r)
    for peer in ("kpa", "apa", "ray_serve", "dynamo_planner"):  # at their defaults, with what was ported
        assert keys <= set(ref[peer]) and ref[peer]["source"]
    assert [s["target_utilization"] for s in ref["hpa_sweep"]] == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert ref["hpa"] == {k: v for k, v in ref["hpa_sweep"][2].items() if k != "target_utilization"}
    assert ref["static"]["node_hours"] == ref["static"]["baseline_node_hours"] == out["baseline_node_hours"]
    assert out["savings_pct"] == pytest.approx(100 * (1 - out["node_hours"] / out["baseline_node_hours"]), abs=1e-3)
    rows = list(csv.DictReader(tl.open()))
    # the span is 58 min and a bit: 59 minute rows, and every arrival is in one of them
    assert len(rows) == 59 and sum(int(r["arrivals"]) for r in rows) == out["requests"]
    assert "<svg" in plot.read_text()


def test_simulate_table_and_bad_input(tmp_path):
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--compare")
    assert p.returncode == 0 and "oracle" in p.stdout and "HPA sweep" in p.stdout
    bad = tmp_path / "bad.csv"
    rows = [f"{10 * i},2500,200" for i in range(100)]
    rows[1] = "10,2500,-3"  # line 3 of the file
    bad.write_text("timestamp_s,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(bad))
    assert p.returncode == 2 and f"{bad}:3: output_tokens: -3 is negative" in p.stderr
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(bad), "--skip-bad-rows",
                "--peak-utilization", "0.05", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["trace"]["bad_rows"] == 1
    p = run_cli("simulate", "--policy", "policies/default.yaml", "--trace", str(AZURE), "--plot", str(tmp_path / "x.gif"))
    assert p.returncode == 2 and "x.gif" in p.stderr


def test_simulate_writes_the_ledger_and_it_reconciles(tmp_path):
    db = f"sqlite:///{tmp_path / 'l.db'}"
    # The default without the cold start's hold (a one-hour trace is too short for it to drain:
    # core.md, "what the measured rises can show"), so that there is something to account for.
    data = yaml.safe_load((ROOT / "policies/default.yaml").read_text())
    data["scaling"]["scale_down"]["min_measured_rises"] = 0
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    p = run_cli("simulate", "--policy", str(tmp_path / "p.yaml"), "--trace", str(AZURE), "--json", "--db", db,
                "--peak-utilization", "0.1")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["scale_downs"] >= 1  # something to account for
    r = run_cli("report", "--db", db, "--source", "simulation", "--from", "2023-11-16", "--to", "2023-11-17",
                "--format", "json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["totals"]["node_hours"] == pytest.approx(out["node_hours"], abs=1e-3)
    live = run_cli("report", "--db", db, "--from", "2023-11-16", "--to", "2023-11-17", "--format", "json")
    assert json.loads(live.stdout)["totals"]["node_hours"] == 0  # never mixed with live unasked


def test_servegen_gaps_are_reported():
    policy = load_policy(ROOT / "policies/default.yaml").policy
    _, _, info = prepare_trace(str(SERVEGEN), "auto", policy, 0.5, 0)
    assert info["gap_windows"] == 37


def test_the_default_keeps_always_ons_slo_on_bursts_shorter_than_a_minute():
    """SLO parity is the hard constraint (docs/interfaces.md, "The order of the targets"). On m-small
    at 0.35 (seed 0) the bursts are shorter than a minute: with rises measured on minute means the
    default lost 0.85 pp against always-on; measured halfway to each minute's busiest tick
    (core/risk.py, PEAK_WEIGHT) it keeps within 0.5 pp. Judged in requests (excess held 2 minutes,
    the week's tail from this time of day) it saves 18.4% of always-on's node-hours at 0.31 pp below
    its SLO, about the rate oracle's 18.37% at 0.075 pp (the exceedance rule saved 2.0% here), while a
    fleet that never drains (always-on itself) fails the rate oracle's node-hours bar on the same cell."""
    policy = load_policy(ROOT / "policies/default.yaml").policy
    trace, factor, info = prepare_trace(str(SERVEGEN), "auto", policy, 0.35, 0)
    # Always-on, the oracle and one HPA setting: the whole HPA sweep and a second replay of the core
    # (with its drains dropped) doubled the test's CPU and checked nothing always-on does not.
    keep = {"static", "oracle", "oracle_rate", "hpa@0.7"}
    runs = backtest(trace, factor, policy, compare=True, seed=0,
                    skip=frozenset(n for n in reference_names(policy) if n not in keep))
    ours, static = runs["ours"].summary, runs["static"].summary
    assert static["slo_attainment"] - ours["slo_attainment"] <= 0.005, (ours, static)
    assert ours["node_hours"] < 0.9 * static["node_hours"], (ours, static)
    stuck = verdict(static, static, runs["oracle"].summary, [{**runs["hpa@0.7"].summary, "target_utilization": 0.7}],
                    {}, runs["oracle_rate"].summary)
    assert stuck["slo_within_0_5pp_of_static"] and not stuck["within_rate_oracle"], stuck
    assert not stuck["meets_targets"]


def test_drain_timeout_not_aligned_to_ticks_cuts_what_ran_past_the_deadline():
    # g2 drains at the tick at 15 s with a 20 s timeout: deadline 35 s. Its request (500 input
    # tokens, 0.2 s prefill, then 830 tokens at 20/s = 41.5 s) ends at 41.7 s: past the deadline,
    # so it is cut although the tick that notices (45 s) comes after it ended; g2 stops at 35 s.
    policy = make_policy(fleet={"ceiling_groups": 2, "floor_groups": 1}, drain={"timeout_s": 20})
    trace = handmade([0, 0, 90], [500, 500, 500], [10, 830, 10])
    r = simulate(trace, policy, Fixed(["g2"]))
    assert r.cut.tolist() == [False, True, False]
    assert r.group_intervals["g2"] == [(0.0, 35.0)]


class Recorder:
    """Records (tick time, time of the signals it was shown)."""

    def __init__(self, period_s):
        self.period_s, self.seen = period_s, []

    def tick(self, now, signals, fleet):
        self.seen.append((now, signals.at))
        return [], []

    def on_ready(self, name, startup_s):
        pass


@pytest.mark.parametrize("tick, scrape", [(15, 15), (60, 15), (15, 30), (15, 5)])
def test_controllers_see_signals_one_scrape_old(tick, scrape):
    policy = make_policy(simulation={"scrape_interval_s": scrape})
    trace = handmade(list(range(0, 600, 7)), [100] * 86, [10] * 86)
    rec = Recorder(tick)
    simulate(trace, policy, rec)
    # the first ticks (before a scrape that old exists) see the fleet as it is; every later tick
    # sees the scrape taken exactly scrape_interval_s before it
    late = [(now, at) for now, at in rec.seen if now - scrape >= 0]
    assert late and all(now - at == pytest.approx(scrape) for now, at in late), rec.seen[:6]


def test_the_backtest_hands_the_core_the_traces_own_clock():
    # A trace without absolute times starts on Monday 2026-01-05 00:00 UTC (docs/interfaces.md, "Time
    # in traces"). A Monday 09:00-10:00 window raising the floor to 3 applies at 09:00 of the replay:
    # the core sees the trace's UTC dates, not seconds since 1970-01-01 (a Thursday, when a Monday
    # window never opens).
    from autoscaler.core import Action, Reason
    from autoscaler.sim.backtest import backtest

    t = np.arange(0.0, 11 * 3600.0, 60.0)  # a trickle: one short request a minute for 11 hours
    trace = handmade(t, [200] * len(t), [20] * len(t), span=(0.0, 11 * 3600.0))
    policy = make_policy(schedules={"windows": [{"name": "monday-standup", "days": ["mon"], "start": "09:00",
                                                 "end": "10:00", "floor_groups": 3}]})
    ours = backtest(trace, 1.0, policy, compare=False, keep_decisions=True, workers=1)["ours"]
    ups = [(now, d) for now, d in ours.controller.decisions if d.action is Action.SCALE_UP]
    assert ups and ups[0][1].reason is Reason.BELOW_FLOOR, [(n, d.reason) for n, d in ups]
    assert 9 * 3600 <= ups[0][0] < 9 * 3600 + 15 and ups[0][1].inputs["floor_source"] == "window monday-standup"
    # Before 09:00 the trickle drained the fleet to its floor of 1.
    before = [d for now, d in ours.controller.decisions if 8 * 3600 <= now < 9 * 3600]
    assert before and all(d.inputs["active"] == 1 for d in before)
