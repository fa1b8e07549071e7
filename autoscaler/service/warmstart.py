"""The live warm start (docs/live.md, "Warm start"): a first start of a site reads the fleet's
recorded demand from Prometheus and folds it into the core's memory.

What is read: the last ``forecast.seasonal_days`` days (at least the risk's three hours of recent
rises, ``RECENT_MINUTES``, when that is 0) up to now, of the demand the core decides on live
(running + queued over the policy's groups, ``prom_history.fetch_demand_history``), at a step of
the tick interval, but at least ``MIN_STEP_S`` and at most a minute: fine enough for the risk's
per-minute means (four readings a minute at 15 s), coarse enough that a week is 40,321 points a
series, four range queries of 11,000 each (a 2 s tick would read 302,401). The whole read is
bounded by ``BUDGET_S``: it runs in the tick thread, before the first tick (the lease is renewed by
its own thread meanwhile), and a shutdown waits for it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from autoscaler.adapters.prom_history import DemandHistory, fetch_demand_history
from autoscaler.core.risk import RECENT_MINUTES
from autoscaler.core.types import Memory, iso
from autoscaler.core.warm import fold_demand_history
from autoscaler.errors import AutoscalerError
from autoscaler.policy.model import Policy

log = logging.getLogger("autoscaler.warm_start")

DAY_S = 86400.0
MIN_STEP_S = 15.0
MAX_STEP_S = 60.0
BUDGET_S = 10.0  # the whole read: well within the 18 s a shutdown waits for the tick in progress


def history_range(policy: Policy, now: float) -> tuple[float, float, float]:
    """(start, end, step) of the read, on the step's grid: e.g. seasonal_days 7, tick 15 s, now
    12:00:07 -> (12:00:00 seven days ago, 12:00:00, 15 s). The recent rises' span and the step follow
    the core's minute (``forecast.minute_s``): a compressed fleet's minute (2 s, ticks of 1 s) is
    shorter than two steps of 15 s, so it is read at half a minute, 1 s, over its 180 minutes of 2 s."""
    minute = policy.forecast.minute_s
    span = max(policy.forecast.seasonal_days * DAY_S, RECENT_MINUTES * minute)
    step = min(MAX_STEP_S, max(MIN_STEP_S, float(policy.scaling.tick_interval_s)))
    if minute < 2 * step:
        step = max(1.0, minute / 2)
    end = math.floor(now / step) * step
    return end - span, end, step


@dataclass(frozen=True)
class WarmStart:
    """Reads the history from ``url`` (``read``) and folds it into a memory (``apply``)."""

    url: str
    budget_s: float = BUDGET_S

    def read(self, policy: Policy, now: float) -> DemandHistory:
        start, end, step = history_range(policy, now)
        return fetch_demand_history(self.url, policy, start, end, step_s=step, timeout_s=self.budget_s,
                                    deadline=time.monotonic() + self.budget_s)

    def apply(self, memory: Memory, policy: Policy, now: float) -> tuple[Memory, dict[str, Any] | None]:
        """(the memory with the history folded in, what was read for /status), or (``memory``, None)
        with a logged warning when nothing could be read: the controller then starts cold."""
        try:
            history = self.read(policy, now)
        except AutoscalerError as exc:
            log.warning("warm start: no history read from %s (%s); starting cold", self.url, exc)
            return memory, None
        if not history.samples:
            log.warning("warm start: %s has no demand history of the fleet from %s to %s (%s; %s); starting cold",
                        self.url, iso(history.start), iso(history.end), history.queries["running"],
                        history.queries["queued"])
            return memory, None
        warmed = fold_demand_history(memory, policy, history.samples)
        first, last = history.samples[0][0], history.samples[-1][0]
        info = {"from": iso(first), "to": iso(last), "samples": len(history.samples), "gaps": history.gaps,
                "step_s": history.step_s, "source": "prometheus", "url": self.url}
        log.info("warm start: read %d demand samples from %s, %s to %s (%.1f h at %g s steps, %d of %d steps "
                 "without data); the memory holds %d 5-minute slots and %d measured rises, and %d minutes of the week's "
                 "tail", len(history.samples), self.url, info["from"], info["to"], (last - first) / 3600.0,
                 history.step_s, history.gaps, history.steps, len(warmed.history_by_slot()), len(warmed.rise_log),
                 warmed.tail_minutes)
        return warmed, info
