"""Cost arithmetic: pure functions, exact (``fractions.Fraction``), no database, no clock.

Definitions (docs/ledger.md explains them for finance):

- **Node-hours by state** = the hours each node spends ``active`` / ``idle`` / ``off``, from the
  recorded intervals clipped to the period. ``node_hours`` (the headline) is the active ones:
  2 x the hours each group spends starting, ready, draining or stopping, plus the hours any node
  of a failed group is up (docs/interfaces.md, "Node-hours").
- **Energy (kWh)** = sum over states of node-hours x that state's watts x PUE / 1000.
- **Variable cost** = energy x price per kWh + active node-hours x node-hour fee. This is what
  turning nodes off saves.
- **Fixed cost** = (fixed_monthly_per_node x nodes of the fleet + fixed_monthly_fleet) x hours
  covered / 730. A month is 730 hours (8,760 h / 12) for every month, so a day costs the same
  in February and in March and rows of any size add up. It is paid whether nodes are on or off.
- **Total cost** = variable + fixed.
- **Baseline** = the policy's ceiling (ceiling groups x group size nodes) active for every hour
  covered: baseline variable = ceiling nodes x hours x (active W x PUE / 1000 x price + fee);
  baseline total = baseline variable + the same fixed cost.
- **Saving** (variable) = baseline variable - variable; ``saving_pct_variable`` = that over the
  baseline variable, ``saving_pct_total`` = (baseline total - total) over baseline total: smaller,
  since fixed costs are in both.
- **Cost per million tokens** = total cost / (prompt + generation tokens) x 1,000,000.

"Hours covered" are the hours of the period in which a run was recording (its start to its end,
or to now while it is still going); a period with no run costs nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from decimal import ROUND_HALF_UP, Context, Decimal
from fractions import Fraction
from typing import Any, overload

from autoscaler.ledger.models import NODE_STATES

HOURS_PER_MONTH = Fraction(730)  # 8,760 h / 12
SECONDS_PER_HOUR = 3600
ZERO = Fraction(0)


def exact(x: float | int | str | Fraction) -> Fraction:
    """A price or rate as the decimal it was written as: 0.15 -> 3/20, not the binary float."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(Decimal(str(x)))


def moment(t: float | Fraction) -> Fraction:
    """A time (epoch s) at the ledger's precision, one microsecond, as an exact number."""
    if isinstance(t, Fraction):
        return t
    return Fraction(round(t * 1_000_000), 1_000_000)


@dataclass(frozen=True)
class Prices:
    """A policy's cost section as exact numbers."""

    currency: str
    watts: Mapping[str, Fraction]  # state -> W per node
    pue: Fraction
    energy_price_per_kwh: Fraction
    node_hour_fee: Fraction
    fixed_monthly_per_node: Fraction
    fixed_monthly_fleet: Fraction

    @classmethod
    def from_cost(cls, cost: Mapping[str, Any] | Any) -> Prices:
        """From the policy's ``cost`` section (the pydantic model or its JSON dict)."""
        c = cost if isinstance(cost, Mapping) else cost.model_dump(mode="json")
        return cls(
            currency=c["currency"],
            watts={"active": exact(c["node_power_active_w"]), "idle": exact(c["node_power_idle_w"]),
                   "off": exact(c["node_power_off_w"])},
            pue=exact(c["pue"]),
            energy_price_per_kwh=exact(c["energy_price_per_kwh"]),
            node_hour_fee=exact(c["node_hour_fee"]),
            fixed_monthly_per_node=exact(c["fixed_monthly_per_node"]),
            fixed_monthly_fleet=exact(c["fixed_monthly_fleet"]),
        )


@dataclass(frozen=True)
class FleetSize:
    nodes: int  # every node of the fleet (what fixed costs are paid on)
    ceiling_nodes: int  # the baseline: ceiling groups x group size

    @classmethod
    def from_fleet(cls, fleet: Mapping[str, Any]) -> FleetSize:
        size = int(fleet["group_size_nodes"])
        return cls(nodes=sum(len(n) for n in fleet["groups"].values()), ceiling_nodes=int(fleet["ceiling_groups"]) * size)


def overlap_s(start: Fraction, end: Fraction, lo: Fraction, hi: Fraction) -> Fraction:
    """Seconds of [start, end) inside [lo, hi): 0 when they do not meet."""
    return max(ZERO, min(end, hi) - max(start, lo))


@dataclass
class Usage:
    """What happened in one stretch of time under one policy."""

    span_s: Fraction = ZERO  # seconds covered
    node_s: dict[str, Fraction] = field(default_factory=lambda: {s: ZERO for s in NODE_STATES})
    open_intervals: int = 0  # intervals still open, counted up to now
    prompt_tokens: Fraction = ZERO
    generation_tokens: Fraction = ZERO


def usage_between(
    intervals: Iterable[Any], tokens: Iterable[Any], lo: Fraction, hi: Fraction, now: Fraction
) -> Usage:
    """Clip intervals (``.state``, ``.start``, ``.end`` None while open) and token counts
    (``.start``, ``.end``, ``.prompt_tokens``, ``.generation_tokens``) to [lo, hi).

    An open interval counts up to ``now``. Tokens of a count that straddles the edge are
    shared in proportion to time (a 10-minute count with 6 minutes inside gives 60% of them).
    """
    u = Usage(span_s=max(ZERO, hi - lo))
    for iv in intervals:
        end = now if iv.end is None else moment(iv.end)
        s = overlap_s(moment(iv.start), end, lo, hi)
        if s > 0:
            u.node_s[iv.state] += s
            if iv.end is None:
                u.open_intervals += 1
    for t in tokens:
        start, end = moment(t.start), moment(t.end)
        if end == start:
            share = Fraction(1) if lo <= start < hi else ZERO
        else:
            share = overlap_s(start, end, lo, hi) / (end - start)
        u.prompt_tokens += share * t.prompt_tokens
        u.generation_tokens += share * t.generation_tokens
    return u


@dataclass
class Figures:
    """Exact cost figures of a stretch; they add up (``+``)."""

    span_hours: Fraction = ZERO
    node_hours_by_state: dict[str, Fraction] = field(default_factory=lambda: {s: ZERO for s in NODE_STATES})
    energy_kwh: Fraction = ZERO
    variable_cost: Fraction = ZERO
    fixed_cost: Fraction = ZERO
    baseline_node_hours: Fraction = ZERO
    baseline_energy_kwh: Fraction = ZERO
    baseline_variable_cost: Fraction = ZERO
    open_intervals: int = 0
    prompt_tokens: Fraction = ZERO
    generation_tokens: Fraction = ZERO

    @property
    def node_hours(self) -> Fraction:
        return self.node_hours_by_state["active"]

    @property
    def total_cost(self) -> Fraction:
        return self.variable_cost + self.fixed_cost

    @property
    def baseline_total_cost(self) -> Fraction:
        return self.baseline_variable_cost + self.fixed_cost

    @property
    def saving_variable(self) -> Fraction:
        return self.baseline_variable_cost - self.variable_cost

    @property
    def saving_pct_variable(self) -> Fraction | None:
        if not self.baseline_variable_cost:
            return None
        return 100 * self.saving_variable / self.baseline_variable_cost

    @property
    def saving_pct_total(self) -> Fraction | None:
        if not self.baseline_total_cost:
            return None
        return 100 * (self.baseline_total_cost - self.total_cost) / self.baseline_total_cost

    @property
    def tokens(self) -> Fraction:
        return self.prompt_tokens + self.generation_tokens

    @property
    def cost_per_million_tokens(self) -> Fraction | None:
        if not self.tokens:
            return None
        return self.total_cost * 1_000_000 / self.tokens

    def __add__(self, other: Figures) -> Figures:
        out = Figures()
        for f in fields(Figures):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(out, f.name, {k: a[k] + b[k] for k in a} if isinstance(a, dict) else a + b)
        return out


def cost_of(usage: Usage, prices: Prices, fleet: FleetSize) -> Figures:
    """The cost of one stretch of time under one cost model (see the module docstring)."""
    hours = {s: usage.node_s[s] / SECONDS_PER_HOUR for s in NODE_STATES}
    span_h = usage.span_s / SECONDS_PER_HOUR
    # e.g. 2 nodes x 10 h x 240 W x 1.3 / 1000 = 6.24 kWh
    energy = sum((hours[s] * prices.watts[s] for s in NODE_STATES), ZERO) * prices.pue / 1000
    variable = energy * prices.energy_price_per_kwh + hours["active"] * prices.node_hour_fee
    # (110 x 6 + 0) x 24 h / 730 h = 21.70 per day
    fixed = (prices.fixed_monthly_per_node * fleet.nodes + prices.fixed_monthly_fleet) * span_h / HOURS_PER_MONTH
    base_h = fleet.ceiling_nodes * span_h
    base_energy = base_h * prices.watts["active"] * prices.pue / 1000
    base_variable = base_energy * prices.energy_price_per_kwh + base_h * prices.node_hour_fee
    return Figures(
        span_hours=span_h,
        node_hours_by_state=hours,
        energy_kwh=energy,
        variable_cost=variable,
        fixed_cost=fixed,
        baseline_node_hours=base_h,
        baseline_energy_kwh=base_energy,
        baseline_variable_cost=base_variable,
        open_intervals=usage.open_intervals,
        prompt_tokens=usage.prompt_tokens,
        generation_tokens=usage.generation_tokens,
    )


# ------------------------------------------------------------------------------ presentation
# Decimals shown. A report rounds each row once; its totals are the sums of the rounded rows, and
# derived figures (total = variable + fixed, saving = baseline - variable) are computed from the
# rounded parts, so every column adds up in a spreadsheet to the last digit shown.
PLACES = {"hours": 4, "kwh": 3, "money": 2, "pct": 2, "pct_shown": 1, "per_token": 4, "tokens": 0}
_CTX = Context(prec=60)


@overload
def rounded(x: Fraction | int, kind: str) -> Decimal: ...
@overload
def rounded(x: None, kind: str) -> None: ...
@overload
def rounded(x: Fraction | int | None, kind: str) -> Decimal | None: ...


def rounded(x: Fraction | int | None, kind: str) -> Decimal | None:
    """``x`` rounded half-up to the places of ``kind``: rounded(Fraction(2, 3), "money") = 0.67."""
    if x is None:
        return None
    x = Fraction(x)
    value = _CTX.divide(Decimal(x.numerator), Decimal(x.denominator))
    return value.quantize(Decimal(1).scaleb(-PLACES[kind]), rounding=ROUND_HALF_UP, context=_CTX)
