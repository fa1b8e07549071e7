"""The live service saves the core memory in two rows: the part that changes at every tick, and the
history (finished 5-minute slots, the week's closed hours of rises), which after a week is most of
its 180 KB and is written only when it changes. Driven through the real Controller on a SQLite
ledger with the advisory (shadow) fleet, on a simulated clock."""

from __future__ import annotations

import json
import math
from pathlib import Path

from autoscaler.core.types import GroupSignals, Memory, SignalSnapshot, merge_memory_dicts
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.controller import HISTORY_KEY, MEMORY_KEY, Controller, stored_memory
from autoscaler.service.shadow import ShadowFleet

REPO = Path(__file__).resolve().parent.parent

T0 = 1_767_600_000.0  # a Monday, 08:00 UTC


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Signals:
    """Demand that swings over the hours (so rises are measured and hours of the tail close)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def read(self, now: float, *, expected_groups, silent_is_off: bool = False) -> SignalSnapshot:
        hours = (now - T0) / 3600
        demand = 3.0 + 2.5 * math.sin(hours * 1.7) + (4.0 if int(now // 600) % 5 == 0 else 0.0)
        g = GroupSignals(running=demand, queued=0.0, kv_usage=0.3, ttft_p99_s=0.5, queue_wait_p99_s=0.0,
                         request_rate=demand)
        return SignalSnapshot(now, {}, g)


def controller(ledger: Ledger, clock: Clock) -> Controller:
    # The shipped policy: advisory, one-minute rises, a week's tail.
    return Controller(load_policy(REPO / "policies/default.yaml"), ledger, Signals(clock), source="advisory", clock=clock,
                      executor_factory=lambda policy, live, run_id, epoch: ShadowFleet(
                          policy, live, run_id=run_id, epoch=epoch, clock=clock))


def test_the_history_is_written_when_it_changes_and_the_memory_comes_back_whole(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    clock = Clock()
    writes: list[str] = []
    try:
        ctl = controller(ledger, clock)
        save = ctl.live.save_state

        def counting(key, value, *, epoch):
            writes.append(key)
            save(key, value, epoch=epoch)
        ctl.live.save_state = counting  # type: ignore[method-assign]
        ticks = 0
        while clock.now < T0 + 8 * 3600:  # 8 hours at 30 s: the tail's first hours close after 6
            ctl.tick()
            ticks += 1
            clock.now += 30
        memory = ctl.memory
        assert memory.rise_tail and len(memory.rise_tail) >= 2, "no closed hour of rises: the test checks nothing"
        assert len(memory.demand_by_slot) >= 90
        assert writes.count(MEMORY_KEY) == ticks
        # The history once a slot ends (96 in 8 hours) and once an hour of rises closes, not per tick.
        slots = len(memory.demand_by_slot)
        assert slots <= writes.count(HISTORY_KEY) <= slots + len(memory.rise_tail) + 2, (writes.count(HISTORY_KEY), ticks)
        # What is stored, joined, is the memory itself, and the recent row is small.
        live = LiveLedger(ledger)
        assert stored_memory(live) == json.loads(json.dumps(memory.to_dict()))
        recent = live.load_state(MEMORY_KEY)
        assert len(recent["demand_by_slot"]) <= 1 and len(recent["rise_tail"]) <= 1
        # A restart (a new leader on the same ledger) takes the whole memory back, and saves the
        # history at its first tick: it has not seen it saved.
        again = controller(ledger, clock)
        assert again.memory.to_dict() == memory.to_dict()
        writes.clear()
        again.live.save_state = counting  # type: ignore[method-assign]
        again.tick()
        assert writes == [HISTORY_KEY, MEMORY_KEY]
    finally:
        ledger.close()


def test_a_memory_saved_whole_by_an_older_version_still_loads_and_wins_over_an_older_history():
    full = {"demand_by_slot": {"10": 1.0, "11": 2.0}, "rise_tail": [[5, 60, []], [6, 12, []]]}
    older_history = {"demand_by_slot": {"9": 0.5, "11": 9.0}, "rise_tail": [[4, 60, []], [5, 1, []]]}
    merged = merge_memory_dicts(full, older_history)
    assert merged["demand_by_slot"] == {"9": 0.5, "10": 1.0, "11": 2.0}
    assert merged["rise_tail"] == [[4, 60, []], [5, 60, []], [6, 12, []]]
    assert merge_memory_dicts(full, None) == full
    assert merge_memory_dicts(None, older_history) is None
    # A malformed history is passed on for the memory's own validation to name, not raised here.
    assert merge_memory_dicts({"rise_tail": [[7, 1, []]], "demand_by_slot": {}},
                              {"rise_tail": [["x"]], "demand_by_slot": []})["rise_tail"] == [["x"], [7, 1, []]]


def test_to_dicts_joined_is_to_dict():
    memory = Memory(demand_by_slot={100: 2.0, 101: 3.0}, slot_now=(101, 4.0),
                    rise_tail=((7, 60, ((1.0, 2.0, 3.0),)), (8, 5, ((0.5, 1.0, 1.5),))))
    recent, history = memory.to_dicts()
    assert recent["demand_by_slot"] == {"101": 4.0} and history["demand_by_slot"] == {"100": 2.0}
    assert recent["rise_tail"] == [[8, 5, [[0.5, 1.0, 1.5]]]] and history["rise_tail"] == [[7, 60, [[1.0, 2.0, 3.0]]]]
    assert merge_memory_dicts(recent, history) == memory.to_dict()
