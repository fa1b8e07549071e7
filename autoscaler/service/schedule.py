"""The service's schedule: jobs run every N seconds on the monotonic clock.

A wall-clock step changes nothing here. APScheduler (used before) books its next run on the wall
clock: after the clock jumped forward an hour and back, the next tick was booked an hour ahead and
no tick ran for over 100 s (issue 35). ``time.monotonic`` never steps, so the next run is always
"interval after the last one started", whatever NTP or an operator does to the time of day.

Each job has a thread of its own, so a long tick never delays the policy watch (the tick and the
watch share a lock in the runner; the watch gives up at once when the tick holds it). One run of a
job at a time; a run that comes due while the previous one is still running is run once, late, as
soon as that one ends (coalesced, never skipped for ever). ``kick`` runs a job now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("autoscaler.service")


class _Job:
    def __init__(self, name: str, fn: Callable[[], None], interval_s: float, clock: Callable[[], float],
                 first_in_s: float) -> None:
        self.name, self.fn, self.interval_s, self.clock = name, fn, interval_s, clock
        self.next_at = clock() + first_in_s
        self.wake = threading.Event()  # a kick, a new interval or the shutdown
        self.lock = threading.Lock()  # guards next_at and interval_s
        self.thread: threading.Thread | None = None


class MonotonicScheduler:
    """Interval jobs on ``clock`` (``time.monotonic``; a test may pass its own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._jobs: dict[str, _Job] = {}
        self._stop = threading.Event()
        self.running = False

    def add(self, name: str, fn: Callable[[], None], interval_s: float, *, first_in_s: float | None = None) -> None:
        """Run ``fn`` every ``interval_s`` (the first run ``first_in_s`` from now; default one interval)."""
        self._jobs[name] = _Job(name, fn, interval_s, self.clock, interval_s if first_in_s is None else first_in_s)

    def start(self) -> None:
        self.running = True
        for job in self._jobs.values():
            job.thread = threading.Thread(target=self._loop, args=(job,), name=f"schedule-{job.name}", daemon=True)
            job.thread.start()

    def kick(self, name: str) -> None:
        """Run the job now (or as soon as its run in progress ends)."""
        job = self._jobs[name]
        with job.lock:
            job.next_at = self.clock()
        job.wake.set()

    def reschedule(self, name: str, interval_s: float) -> None:
        """A new interval; the next run is one new interval from now (or sooner, if it was due sooner)."""
        job = self._jobs[name]
        with job.lock:
            job.interval_s = interval_s
            job.next_at = min(job.next_at, self.clock() + interval_s)
        job.wake.set()

    def shutdown(self) -> None:
        """No new run starts; a run in progress is not waited for."""
        self.running = False
        self._stop.set()
        for job in self._jobs.values():
            job.wake.set()

    def _loop(self, job: _Job) -> None:
        while not self._stop.is_set():
            with job.lock:
                wait = job.next_at - self.clock()
            if wait > 0:
                job.wake.wait(wait)
                job.wake.clear()
                continue  # woken: kicked, rescheduled, stopped or due; look again
            with job.lock:
                # The next run is one interval after this one started (a kick meanwhile brings it
                # forward); a run that overran its interval is followed by one at once (late, once),
                # never by a burst of missed ones.
                job.next_at = self.clock() + job.interval_s
            try:
                job.fn()
            except Exception:  # noqa: BLE001 - a job that fails runs again at its next time
                log.exception("scheduled job %s failed", job.name)
