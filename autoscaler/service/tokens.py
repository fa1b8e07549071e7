"""Tokens served by a live fleet, for the ledger's cost per million tokens.

Each tick the controller hands the meter the groups that may serve (registering, ready, draining)
and their worker URLs; the meter reads each worker's counters (``prompt_tokens_total``,
``generation_tokens_total``, as SGLang and the emulator export them) and records what was served
between readings with ``Ledger.record_tokens``, per group, at most once a ``flush_s`` (and when the
run ends), so a 15 s tick does not write a row per group per tick.

Counters are cumulative per worker process:

- the first reading of a group already serving when the meter started is only a baseline (what it
  served before belongs to an earlier run, or to no run at all);
- a group seen off and then serving is a new worker process: its counters start at 0, so its first
  reading counts in full (from when it was first seen serving);
- a counter that went down is a restarted worker: what it reads now was served since the restart.

A worker that cannot be read this tick keeps its last reading; what it serves meanwhile is counted
at the next reading. A ledger that refuses the write keeps the counts for the next flush.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autoscaler.errors import RuntimeFailure

log = logging.getLogger("autoscaler.tokens")

Reader = Callable[[str], "tuple[float, float] | None"]  # worker URL -> (prompt, generation) counters
Recorder = Callable[[float, float, int, int, str], None]  # (start, end, prompt, generation, group)
FLUSH_S = 60.0


@dataclass
class _Seen:
    at: float
    prompt: float
    generation: float


class TokenMeter:
    def __init__(self, read: Reader, record: Recorder, *, flush_s: float = FLUSH_S) -> None:
        self.read = read
        self.record = record
        self.flush_s = flush_s
        self._last: dict[str, _Seen] = {}  # group -> its last reading
        self._was_off: set[str] = set()  # groups seen not serving: their next worker starts from 0
        self._pending: dict[str, list[float]] = {}  # group -> [since, prompt, generation] not yet recorded
        self._flushed_at: float | None = None

    def observe(self, now: float, serving: Mapping[str, str], all_groups: list[str]) -> None:
        """One tick: ``serving`` maps the groups that may serve to their worker URLs."""
        for group in all_groups:
            if group not in serving:
                self._last.pop(group, None)
                self._was_off.add(group)
        for group, url in serving.items():
            counters = self.read(url)
            if counters is None:
                continue
            prompt, generation = counters
            prev = self._last.get(group)
            if prev is None and group in self._was_off:
                prev = _Seen(now, 0.0, 0.0)  # a new worker process: everything it counted is this run's
            self._was_off.discard(group)
            self._last[group] = _Seen(now, prompt, generation)
            if prev is None:
                continue  # a baseline: served before this meter started
            d_prompt = prompt - prev.prompt if prompt >= prev.prompt else prompt  # a lower count: restarted
            d_gen = generation - prev.generation if generation >= prev.generation else generation
            if d_prompt or d_gen:
                slot = self._pending.setdefault(group, [prev.at, 0.0, 0.0])
                slot[1] += d_prompt
                slot[2] += d_gen
        if self._flushed_at is None:
            self._flushed_at = now
        elif now - self._flushed_at >= self.flush_s:
            self.flush(now)

    def flush(self, now: float) -> None:
        """Record every group's pending counts, from its first unrecorded reading to ``now``."""
        self._flushed_at = now
        for group, (since, prompt, generation) in list(self._pending.items()):
            try:
                self.record(since, max(now, since), int(round(prompt)), int(round(generation)), group)
            except RuntimeFailure as exc:
                log.error("tokens of %s not recorded (kept for the next try): %s", group, exc)
                continue
            del self._pending[group]
