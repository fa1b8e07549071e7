"""A tiny Prometheus registry that writes the plain text format 0.0.4 itself.

Why not prometheus_client: its registry is process-global, and since 0.23 it answers an
OpenMetrics ``Accept`` header with escaped names (``sglang_num_running_reqs``), which is the trap
CONTEXT.md section 5 describes. Writing the 0.0.4 text ourselves keeps the colons whatever the
scraper asks for, and lets the metric prefix be a plain string.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it: integers without a fraction, NaN, +Inf, -Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}.0"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: dict[str, str], extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = list(labels.items()) + list(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in pairs) + "}"


@dataclass
class Histogram:
    """Cumulative buckets as Prometheus expects; ``upper_bounds`` excludes +Inf."""

    upper_bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    total: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.upper_bounds) + 1)

    def observe(self, value: float, times: int = 1, sum_value: float | None = None) -> None:
        """Record ``value`` ``times`` times; ``sum_value`` overrides what is added to the sum.

        SGLang observes inter-token latency this way: one interval spread over the tokens of a
        chunk (interval / tokens, counted ``tokens`` times, the whole interval added to the sum).
        """
        index = bisect_left(self.upper_bounds, value)  # le is inclusive: value == bound goes in it
        self.counts[index] += times
        self.count += times
        self.total += value * times if sum_value is None else sum_value


@dataclass
class Family:
    name: str
    kind: str  # "gauge", "counter", "histogram"
    help: str
    value: float = 0.0
    histogram: Histogram | None = None

    def observe(self, value: float, times: int = 1, sum_value: float | None = None) -> None:
        """Observe into this family's histogram (a family made by ``Registry.histogram``)."""
        assert self.histogram is not None, f"{self.name} is a {self.kind}, not a histogram"
        self.histogram.observe(value, times, sum_value)


class Registry:
    """Metric families with one shared label set (one SGLang engine exports one series each)."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = dict(labels)
        self.families: dict[str, Family] = {}

    def gauge(self, name: str, help: str) -> Family:
        return self._add(Family(name, "gauge", help))

    def counter(self, name: str, help: str) -> Family:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        return self._add(Family(name, "counter", help))

    def histogram(self, name: str, help: str, buckets: tuple[float, ...]) -> Family:
        return self._add(Family(name, "histogram", help, histogram=Histogram(tuple(buckets))))

    def _add(self, family: Family) -> Family:
        if family.name in self.families:
            raise ValueError(f"duplicate metric {family.name}")
        self.families[family.name] = family
        return family

    def render(self, *, nan_values: bool = False, timestamp_ms: int | None = None) -> str:
        """The exposition text. ``nan_values`` writes NaN for every gauge (a fault mode);
        ``timestamp_ms`` stamps every sample with that time (the ``frozen`` fault mode)."""
        ts = f" {timestamp_ms}" if timestamp_ms is not None else ""
        lab = format_labels(self.labels)
        lines: list[str] = []
        for fam in self.families.values():
            lines.append(f"# HELP {fam.name} {fam.help}")
            lines.append(f"# TYPE {fam.name} {fam.kind}")
            if fam.kind == "histogram":
                assert fam.histogram is not None
                h = fam.histogram
                cumulative = 0.0
                for bound, n in zip(h.upper_bounds, h.counts):
                    cumulative += n
                    le = format_labels(self.labels, (("le", format_value(bound)),))
                    lines.append(f"{fam.name}_bucket{le} {format_value(cumulative)}{ts}")
                le = format_labels(self.labels, (("le", "+Inf"),))
                lines.append(f"{fam.name}_bucket{le} {format_value(h.count)}{ts}")
                lines.append(f"{fam.name}_sum{lab} {format_value(h.total)}{ts}")
                lines.append(f"{fam.name}_count{lab} {format_value(h.count)}{ts}")
            else:
                value = math.nan if (nan_values and fam.kind == "gauge") else fam.value
                lines.append(f"{fam.name}{lab} {format_value(value)}{ts}")
        return "\n".join(lines) + "\n"
