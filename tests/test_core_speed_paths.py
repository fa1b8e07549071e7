"""The core's speed paths give the numbers of the plain rule they stand for.

The replay's speed work (docs/benchmarks.md) wrote a few rules out again for speed: the added share
per height without a call each, the three hours' arrays edited in place of rebuilt, a day's seasonal
growths carried from slot to slot, the replay's early answer of the risk in requests from a few
rises, a frozen value's ``__init__`` through its slots, the seasonal history's order known instead
of checked. ``bench/replay_digests.py`` compares whole replays with the code before them; these
compare each path with its plain rule, so a drift fails here, in the suite."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from autoscaler.core import forecast, risk
from autoscaler.core.forecast import ForecastResult
from autoscaler.core.types import slot_init


def test_the_added_share_of_each_height_is_the_rule_at_each_height() -> None:
    heights = [x / 4 for x in range(-8, 120)]
    for after, before, full in ((12.0, 18.0, 4.0), (12.0, 12.0, 0.5), (3.0, 30.0, 7.25)):
        assert risk._added_each(heights, after, before, full) == \
            [risk._added_misses(h, after, before, full) for h in heights]


def test_a_minutes_edit_in_place_is_the_insert_then_the_delete() -> None:
    a = np.arange(7, dtype=float)
    for i in range(8):  # the insert's index, in the array of 7
        for j in range(8):  # the delete's index, in the array of 8 with the insert
            plain = np.concatenate((a[:i], (99.0,), a[i:]))
            plain = np.concatenate((plain[:j], plain[j + 1:]))
            assert risk._moved(a, i, j, 99.0).tolist() == plain.tolist(), (i, j)


def test_a_days_growths_carried_from_slot_to_slot_are_the_growths_computed_afresh() -> None:
    rng = random.Random(3)
    slots = [float(rng.randint(0, 40)) for _ in range(80)]
    moments, ahead = 13, 3
    width = moments + ahead + 1
    risk._DAY_GROWTHS.clear()
    for start in [0, 1, 2, 3, 3, 10, 11, 40, 41, 42]:  # slot by slot, the same slot again, a jump
        known = slots[start:start + width]
        got = risk._known_growths(1, known, moments, ahead)
        assert got == [risk._growth(known, k, ahead) for k in range(moments)], start
    # the plain rule: (the busiest slot ahead + 1) / (the higher of the moment's two levels + 1)
    known = slots[:width]
    assert risk._growth(known, 0, ahead) == (max(known[2:2 + ahead]) + 1.0) / (max(known[0], known[1]) + 1.0)


def _reach(rng: random.Random, n: int) -> tuple:
    rows = sorted((rng.gauss(0.3, 1.2), b := rng.uniform(0.0, 10.0), b + rng.uniform(0.0, 15.0)) for _ in range(n))
    return tuple(rows)


def test_the_replays_early_answer_says_no_only_where_the_full_sum_says_no() -> None:
    rng = random.Random(7)
    answered = 0
    for _ in range(400):
        n = rng.randint(40, 200)
        reach = _reach(rng, n)
        ordered = tuple(r[0] for r in reach)
        z_arr, u_arr = risk._hours_arrays_of(reach)
        level, after = rng.uniform(0.0, 10.0), rng.uniform(2.0, 14.0)
        before, full = after + rng.uniform(0.0, 20.0), rng.uniform(0.3, 6.0)
        scale = (level + 1.0) ** 0.5
        z_at = (after - level) / scale
        weight, stop_above = rng.uniform(0.05, 1.0), rng.choice((0.001, 0.004, 0.01, 0.05))
        at = int(z_arr.searchsorted(z_at, side="right"))
        full_share = risk._added_sum(z_arr[at:], u_arr[at:], level, scale, after, before, full) / n * weight
        early = risk._early_added(reach, ordered, z_at, level, scale, after, before, full, n, weight, stop_above)
        if early is not None:
            answered += 1
            assert stop_above < early <= full_share
    assert answered > 50  # (it does answer: the check is not empty)


def test_a_value_built_through_its_slots_is_the_dataclass_built_one() -> None:
    args = dict(level=1.5, trend=None, seasonal=2.25, peak=2.25, horizon_s=600.0, basis="seasonal")
    built = ForecastResult(**args)
    assert dataclasses.asdict(built) == args and built == ForecastResult(*args.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.level = 2.0  # type: ignore[misc]

    @slot_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithDefault:
        a: float
        b: str = "x"

    assert (WithDefault(1.0), WithDefault(1.0, "y")) == (WithDefault(a=1.0, b="x"), WithDefault(1.0, b="y"))
    with pytest.raises(TypeError):
        @slot_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class WithFactory:
            a: list = dataclasses.field(default_factory=list)


def test_the_seasonal_history_kept_from_a_slot_is_the_filter_in_or_out_of_order() -> None:
    def plain(slots: dict, keep_from: int) -> dict:
        return {k: v for k, v in slots.items() if k >= keep_from}

    in_order = {s: float(s) for s in range(100, 160)}
    forecast._IN_ORDER[:] = [in_order, len(in_order)]  # as demand_changes leaves it for its own history
    got = forecast._slots_from(in_order, 130)
    assert got == plain(in_order, 130) and list(got) == list(plain(in_order, 130))
    shuffled = dict(in_order)
    shuffled[95] = 1.0  # a history built elsewhere: a slot before keep_from, last
    shuffled = {**{120: 0.5}, **shuffled}
    got = forecast._slots_from(shuffled, 130)
    assert got == plain(shuffled, 130) and list(got) == list(plain(shuffled, 130))
