"""bench/miss_sources.py's split of arrivals: the return after a collection gap, a window whose need
jumped (the rate oracle knew it a window ahead), the rest."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from tests.support.procs import REPO

sys.path.insert(0, str(REPO / "bench"))
spec = importlib.util.spec_from_file_location("miss_sources", REPO / "bench" / "miss_sources.py")
assert spec is not None and spec.loader is not None
miss_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(miss_sources)


def test_the_docstring_example_splits_return_jump_and_other() -> None:
    rate = np.array([2.0, 0.0, 0.0, 2.0, 6.0, 6.0])
    t = np.array([100.0, 1_900.0, 2_700.0, 3_100.0])
    got = miss_sources.arrival_sources(t, rate, rate, 600.0, 900.0, 1.5)
    # window 0 has no window before it; 1,900 s is 100 s after the gap; 2,700 s is in window 4 (need 3 x
    # window 3's) and beyond the 900 s after the gap; window 5's need is window 4's
    assert got.tolist() == [2, 0, 1, 2]


def test_a_jump_is_judged_on_the_need_not_the_rate_and_a_return_wins_over_a_jump() -> None:
    rate = np.array([1.0, 1.0, 0.0, 1.0])
    need = np.array([2.0, 3.0, 0.0, 9.0])  # window 1's spread grew at the same rate: 1.5 x the need
    t = np.array([700.0, 1_900.0])
    assert miss_sources.arrival_sources(t, rate, need, 600.0, 600.0, 1.5).tolist() == [1, 0]
    # at a higher bar window 1 is no jump; the return after the gap stays a return (a gap's need is 0)
    assert miss_sources.arrival_sources(t, rate, need, 600.0, 600.0, 2.0).tolist() == [2, 0]
