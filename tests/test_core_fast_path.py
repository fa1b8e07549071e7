"""The replay's fast paths give the decisions of the full ones (docs/benchmarks.md, "The week's
tail's cost"): ``decide(..., explain=False)``, which skips a hold's numbers, and the week's tail's
sorted rises updated an hour at a time instead of sorted again."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.core import Memory
from autoscaler.core.risk import RECENT_MINUTES, TAIL_HOURS, TAIL_PER_HOUR, closed_tail_rises, tail_changes
from autoscaler.policy import load_policy
from autoscaler.sim.backtest import prepare_trace, run_one
from autoscaler.sim.controllers import CoreController

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"
MOONCAKE = ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl"


def _swinging_trace(path: Path, hours: int = 8) -> Path:
    """An Azure-format trace of ``hours`` hours: busy, quiet, busy... an hour and a half at a time,
    with short bursts in the quiet spells (drains and starts both happen)."""
    rng = random.Random(3)
    t0 = datetime(2023, 11, 16, 0, 0, 0)
    rows, t = ["TIMESTAMP,ContextTokens,GeneratedTokens"], 0.0
    while t < hours * 3600:
        busy = int(t // 5400) % 2 == 0 or t % 1800 < 60
        t += rng.expovariate(6.0 if busy else 1.0)
        stamp = (t0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")
        rows.append(f"{stamp},{rng.randint(200, 2000)},{rng.randint(20, 400)}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("trace_of,pu", [("swing", 0.5), ("swing", 0.8), ("swing-30h", 0.5), (AZURE, 0.35),
                                         (MOONCAKE, 0.5)])
def test_a_replay_without_the_holds_numbers_takes_the_same_decisions(trace_of, pu, tmp_path):
    """(30 hours: a day of the week's tail, where the fast path stops counting once the three hours'
    rises alone refuse the drain.)"""
    policy = load_policy(ROOT / "policies/default.yaml").policy
    hours = 30 if trace_of == "swing-30h" else 8
    path = _swinging_trace(tmp_path / "swing.csv", hours) if str(trace_of).startswith("swing") else trace_of
    trace, factor, _ = prepare_trace(str(path), "auto", policy, pu, 0)
    full = CoreController(policy, True, trace.start_epoch_s)  # keeps every decision: explained
    fast = CoreController(policy, False, trace.start_epoch_s)  # keeps the actions: holds unexplained
    a = run_one("ours", trace, policy, full, factor, 0).summary
    b = run_one("ours", trace, policy, fast, factor, 0).summary
    assert {k: v for k, v in a.items() if k != "wall_s"} == {k: v for k, v in b.items() if k != "wall_s"}
    assert full.counts == fast.counts
    acted = [(at, d) for at, d in full.decisions if str(d.action) != "hold"]
    assert acted == fast.decisions  # the drains and starts, with their numbers, alike
    holds = [d for _, d in full.decisions if str(d.action) == "hold"]
    assert holds and all(d.detail and d.inputs for d in holds)
    assert all(not d.detail and not d.inputs for _, d in fast.decisions if str(d.action) == "hold")
    if str(trace_of).startswith("swing"):  # drains and starts, and holds of several reasons
        assert {"scale_down", "scale_up"} <= {str(d.action) for _, d in acted}
        assert {"steady", "stabilizing"} <= {str(d.reason) for d in holds}  # no surplus, and a surplus held


def test_the_tails_sorted_rises_updated_an_hour_at_a_time_are_the_full_sort():
    """Ten days of minutes (the tail's week and more, so hours leave it as well as join it), with
    random rises, ties among them: after every minute, the tail's sorted closed rises equal sorting
    all of them again."""
    rng = random.Random(7)
    mem = Memory()
    start = 1000 * 60
    changed = 0
    for m in range(start, start + (TAIL_HOURS + 60) * 60, 1):
        z = float(rng.choice([0.5, 1.0, rng.random() * 4]))  # ties are common: equal rises stay equal
        aged = ((m, z, 3.0, 3.0 + rng.randint(0, 8)),)
        c = tail_changes(mem, aged, m + RECENT_MINUTES)
        mem = mem.with_(**c)
        if "tail_sorted" in c:
            changed += 1
            assert mem.tail_sorted == closed_tail_rises(mem.rise_tail)
    assert changed >= TAIL_HOURS + 50  # once an hour: hours joined, and (after the week) left
    assert len(mem.rise_tail) == TAIL_HOURS + 1 and len(mem.tail_sorted) == TAIL_HOURS * TAIL_PER_HOUR
    # A memory whose sorted rises do not match its tail (read from an older snapshot) is sorted afresh.
    stale = mem.with_(tail_sorted=())
    c = tail_changes(stale, ((mem.rise_tail[-1][0] * 60 + 60, 1.0, 3.0, 4.0),), 0)
    assert c["tail_sorted"] == closed_tail_rises(c["rise_tail"])


def test_the_fast_path_holds_a_drain_the_utilisation_cap_refuses():
    """Without the numbers (explain=False) a drain the cap refuses is refused at once, as explained:
    demand 11 on 3 ready groups, 2 left carry 12 at the tests' target 1.0: 11 / 12 = 0.92 over the cap
    0.9, however low the risk (no rises measured to refuse it)."""
    from core_helpers import T0, fleet, make_policy, signals

    from autoscaler.core import Action, Memory, decide

    policy = make_policy(scaling={"target_utilization": 1.0, "scale_down": {
        "min_measured_rises": 0, "utilization_below": 0.9, "stabilization_s": 0, "cooldown_after_scale_up_s": 0,
        "min_group_uptime_s": 0, "tail_within_h": None}})
    mem = Memory(minute_now=(int(T0 // 60), 11.0, 1), surplus_since=T0 - 3600,
                 rises_sorted=(0.0,) * 360, rise_reach=((0.0, 11.0, 11.0),) * 360)
    sig = signals(g1=(4, 0, 0.2), g2=(4, 0, 0.1), g3=(3, 0, 0.1), request_rate=1.0)
    for explain in (True, False):
        d, _ = decide(sig, fleet("ready", "ready", "ready"), policy, mem, T0, explain=explain)
        assert d.action is Action.HOLD, (explain, d.detail)


def test_the_fast_path_drains_where_the_explained_decision_drains_on_the_weeks_evidence():
    """A replay's early answer (``stop_above``) keeps the week's minutes for the evidence floor. Budget
    0.25%; this tick's arrivals with no miss make the burn 0.73 x: 0.34% allowed as a chance,
    0.25% in requests. Demand 3 on 3 groups; 2 left carry 8.4. The three hours: 1 of 180 rises
    exceeds (3 -> 20), 0.56% as a chance, above 0.34%: the early answer; the week's tail adds 480
    quiet minutes. In requests (100/s, TTFT target 3 s: 300 queued make every arrival miss) the drain
    adds 0.0021% of arrivals, and the evidence floor is 1 / (660 + 2) = 0.15%: a drain, explained or
    not (the three hours alone said 1 / 182 = 0.55%, above the 0.34% allowed). The cold start's
    evidence floor is on here (min_measured_rises 30), as shipped."""
    from core_helpers import T0, fleet, make_policy, signals

    from autoscaler.core import Action, Memory, decide
    from autoscaler.core.risk import exceed_probability

    policy = make_policy(slo={"capacity_miss_budget_pct": 0.25},
                         scaling={"scale_down": {"stabilization_s": 0, "min_measured_rises": 30}})
    minute, hour = int(T0 // 60), int(T0 // 3600)
    recent = tuple(sorted(((0.0, 3.0, 3.0),) * 179 + ((8.5, 3.0, 20.0),)))
    tail = ((hour - 24, 420, ()), (hour - 23, 60, ()))  # the same time of day yesterday: 480 quiet minutes
    mem = Memory(minute_now=(minute, 3.0, 1, 3.0), rises_sorted=tuple(r[0] for r in recent), rise_reach=recent,
                 rise_tail=tail, tail_sorted=closed_tail_rises(tail), tail_minutes=480)
    early = exceed_probability(mem, policy, T0, 8.4, 615, stop_above=0.004)
    assert early.probability == pytest.approx(1 / 180) and early.p_week is None and early.week_minutes == 660
    full = exceed_probability(mem, policy, T0, 8.4, 615)
    assert full.p_week == pytest.approx(1 / 660) and full.week_minutes == 660
    sig = signals(g1=(1, 0, 0.2), g2=(1, 0, 0.2), g3=(1, 0, 0.2), request_rate=100.0)
    for explain in (True, False):
        d, _ = decide(sig, fleet("ready", "ready", "ready"), policy, mem, T0, explain=explain)
        assert d.action is Action.SCALE_DOWN, (explain, d.detail)
    assert "expected added misses 0.0021% of arrivals" in d.detail and "allows 0.25% in requests (0.34% as a chance)" in d.detail, d.detail


def test_the_fourteen_day_replay_decides_the_same_fast_and_explained():
    """The whole 14-day ServeGen trace at peak use 0.5 (the README's and finance's backtest), ours
    replayed both ways (bench/fast_path_check.py): the same summary, decisions and final memory. The
    30 hours above missed the early answer's evidence floor (1,794.9 node-hours fast, 1,793.0
    explained, until 819bbef): it needs days of the week's tail and a burning budget."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fast_path_check", ROOT / "bench" / "fast_path_check.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.check("servegen:0:0.5", str(ROOT / "policies/default.yaml"))
