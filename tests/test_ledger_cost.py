"""Cost arithmetic (autoscaler.ledger.cost): table tests with the arithmetic in comments."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from autoscaler.ledger.cost import (
    FleetSize,
    Prices,
    cost_of,
    exact,
    moment,
    rounded,
    usage_between,
)
from autoscaler.ledger.store import NodeInterval, TokenCount
from autoscaler.policy.model import Cost

H = 3600
DEFAULT = Prices.from_cost(Cost())  # 240/45/3 W, PUE 1.3, 0.15 per kWh, no fee, 110 per node-month
SIX = FleetSize(nodes=6, ceiling_nodes=6)


def usage(*intervals, lo=0, hi=24 * H, now=10**9, tokens=()):
    return usage_between(intervals, tokens, Fraction(lo), Fraction(hi), Fraction(now))


@pytest.mark.parametrize(
    "intervals, kwh",
    [
        # 2 nodes x 10 h x 240 W x 1.3 / 1000 = 6.24 kWh
        ([NodeInterval("a", "g", "active", 0, 10 * H), NodeInterval("b", "g", "active", 0, 10 * H)], "6.24"),
        # 2 nodes x 10 h x 45 W x 1.3 / 1000 = 1.17 kWh
        ([NodeInterval("a", "g", "idle", 0, 10 * H), NodeInterval("b", "g", "idle", 0, 10 * H)], "1.17"),
        # 2 nodes x 10 h x 3 W x 1.3 / 1000 = 0.078 kWh
        ([NodeInterval("a", "g", "off", 0, 10 * H), NodeInterval("b", "g", "off", 0, 10 * H)], "0.078"),
        # 1 node x 30 min x 240 W x 1.3 / 1000 = 0.156 kWh
        ([NodeInterval("a", "g", "active", 0, H / 2)], "0.156"),
    ],
)
def test_energy_is_hours_times_watts_of_the_state_times_pue(intervals, kwh):
    fig = cost_of(usage(*intervals), DEFAULT, SIX)
    assert fig.energy_kwh == Fraction(Decimal(kwh))
    # variable = energy x 0.15 (no node-hour fee in the default model)
    assert fig.variable_cost == Fraction(Decimal(kwh)) * Fraction(3, 20)


def test_node_hour_fee_is_charged_on_active_hours_only():
    prices = Prices.from_cost(Cost(node_hour_fee=0.5))
    fig = cost_of(usage(NodeInterval("a", "g", "active", 0, 10 * H), NodeInterval("b", "g", "idle", 0, 10 * H)),
                  prices, SIX)
    # energy: (10 h x 240 W + 10 h x 45 W) x 1.3 / 1000 = 3.705 kWh -> x 0.15 = 0.55575
    # fee: 10 active node-hours x 0.5 = 5 (the idle node pays none)
    assert fig.energy_kwh == Fraction("3.705")
    assert fig.variable_cost == Fraction("0.55575") + 5
    assert fig.node_hours_by_state == {"active": 10, "idle": 10, "off": 0}


def test_fixed_cost_is_prorated_over_730_hours_a_month():
    fig = cost_of(usage(lo=0, hi=24 * H), DEFAULT, SIX)
    # (110 x 6 nodes + 0) x 24 h / 730 h = 15840 / 730 = 21.6986...
    assert fig.fixed_cost == Fraction(110 * 6 * 24, 730)
    assert rounded(fig.fixed_cost, "money") == Decimal("21.70")
    with_fleet = cost_of(usage(lo=0, hi=730 * H), Prices.from_cost(Cost(fixed_monthly_fleet=1000)), SIX)
    # a whole 730-hour month: 110 x 6 + 1000 = 1660
    assert with_fleet.fixed_cost == 1660


def test_baseline_is_the_ceiling_always_on_and_savings_split_variable_from_total():
    # g1 (2 nodes) on all day, the other 4 nodes off
    ivs = [NodeInterval(n, "g1", "active", 0, 24 * H) for n in ("a", "b")]
    ivs += [NodeInterval(n, "gx", "off", 0, 24 * H) for n in ("c", "d", "e", "f")]
    fig = cost_of(usage(*ivs), DEFAULT, SIX)
    # baseline: 6 nodes x 24 h = 144 node-hours x 240 W x 1.3 / 1000 = 44.928 kWh x 0.15 = 6.7392
    assert fig.baseline_node_hours == 144
    assert fig.baseline_variable_cost == Fraction("6.7392")
    # actual: (2 x 24 x 240 + 4 x 24 x 3) x 1.3 / 1000 = (11520 + 288) x 1.3 / 1000 = 15.3504 kWh -> 2.30256
    assert fig.variable_cost == Fraction("2.30256")
    # saving 6.7392 - 2.30256 = 4.43664 = 65.83% of variable
    assert fig.saving_variable == Fraction("4.43664")
    assert rounded(fig.saving_pct_variable, "pct") == Decimal("65.83")
    # on total: fixed 21.6986 in both -> 4.43664 / (6.7392 + 21.6986) = 15.60%
    assert rounded(fig.saving_pct_total, "pct") == Decimal("15.60")
    assert fig.saving_pct_total < fig.saving_pct_variable


def test_a_smaller_ceiling_makes_a_smaller_baseline():
    fig = cost_of(usage(lo=0, hi=10 * H), DEFAULT, FleetSize(nodes=6, ceiling_nodes=4))
    # 4 nodes x 10 h = 40 node-hours x 240 x 1.3 / 1000 = 12.48 kWh x 0.15 = 1.872
    assert fig.baseline_node_hours == 40
    assert fig.baseline_variable_cost == Fraction("1.872")


def test_intervals_are_clipped_to_the_period_and_open_ones_count_to_now():
    ivs = [
        NodeInterval("a", "g", "active", -5 * H, 3 * H),  # 3 h inside [0, 10 h)
        NodeInterval("b", "g", "active", 8 * H, 15 * H),  # 2 h inside
        NodeInterval("c", "g", "idle", 20 * H, 30 * H),  # outside
        NodeInterval("d", "g", "active", 6 * H, None),  # open: counts to now = 9 h -> 3 h
    ]
    u = usage(*ivs, lo=0, hi=10 * H, now=9 * H)
    assert u.node_s == {"active": 8 * H, "idle": 0, "off": 0}  # 3 + 2 + 3 hours
    assert u.open_intervals == 1


def test_tokens_straddling_the_edge_are_shared_by_time_and_give_cost_per_million():
    # a 10-minute count with 6 minutes inside the period gives 60% of its tokens
    tokens = [TokenCount(-240, 360, prompt_tokens=1_000_000, generation_tokens=500_000)]
    u = usage(NodeInterval("a", "g", "active", 0, H), lo=0, hi=H, tokens=tokens)
    assert u.prompt_tokens == 600_000 and u.generation_tokens == 300_000
    fig = cost_of(u, DEFAULT, FleetSize(nodes=1, ceiling_nodes=1))
    # total = 1 h x 240 W x 1.3 / 1000 x 0.15 = 0.0468 + fixed 110 x 1 x 1 / 730 = 0.150685 -> 0.197485
    # per million tokens: 0.197485 / 0.9 = 0.219428...
    assert fig.total_cost == Fraction("0.0468") + Fraction(110, 730)
    assert fig.cost_per_million_tokens == fig.total_cost / Fraction(9, 10)
    assert rounded(fig.cost_per_million_tokens, "per_token") == Decimal("0.2194")


def test_no_tokens_means_no_cost_per_token_and_no_baseline_means_no_percentage():
    fig = cost_of(usage(lo=0, hi=0), DEFAULT, SIX)
    assert fig.cost_per_million_tokens is None
    assert fig.saving_pct_variable is None and fig.saving_pct_total is None


def test_figures_add_up():
    a = cost_of(usage(NodeInterval("a", "g", "active", 0, 5 * H), lo=0, hi=12 * H), DEFAULT, SIX)
    b = cost_of(usage(NodeInterval("a", "g", "active", 12 * H, 13 * H), lo=12 * H, hi=24 * H), DEFAULT, SIX)
    whole = cost_of(usage(NodeInterval("a", "g", "active", 0, 5 * H), NodeInterval("a", "g", "active", 12 * H, 13 * H)),
                    DEFAULT, SIX)
    s = a + b
    assert s.variable_cost == whole.variable_cost and s.fixed_cost == whole.fixed_cost
    assert s.node_hours == 6 and s.span_hours == 24


@pytest.mark.parametrize(
    "value, kind, expected",
    [
        (Fraction(2, 3), "money", "0.67"),
        (Fraction(5, 1000), "money", "0.01"),  # half-up, not half-even (0.005 -> 0.01)
        (Fraction(125, 10000), "hours", "0.0125"),
        (Fraction(1, 3), "pct", "0.33"),
    ],
)
def test_rounding_is_half_up_at_the_places_shown(value, kind, expected):
    assert rounded(value, kind) == Decimal(expected)


def test_prices_are_the_decimals_written_and_times_are_microseconds():
    assert exact(0.15) == Fraction(3, 20)  # not the binary float 0.1499999...
    assert moment(1767571200.000001) == Fraction(1767571200000001, 1_000_000)
