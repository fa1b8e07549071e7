"""A live fleet for executor and service tests: a policy on free ports, the executor wired to the
real gateway and the local actuator, a streaming load that runs in a thread, and cleanup of every
emulated worker the test started (by the PIDs the workers report), also when the test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from autoscaler.actuators.base import GroupStatus
from autoscaler.actuators.local import LocalActuator, port_open
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action, Decision, Reason
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.executor import Executor
from tests.support.procs import REPO, free_port, stream_post


def write_policy(path: Path, *, ports: list[int] | None = None, **overrides) -> Path:
    """policies/demo.yaml with the three worker URLs on free ports and ``overrides`` merged in
    (``{"lifecycle": {"health_deadline_s": 2}}``)."""
    data = yaml.safe_load((REPO / "policies" / "demo.yaml").read_text())
    ports = ports or [free_port() for _ in data["fleet"]["groups"]]
    for group, port in zip(data["fleet"]["groups"], ports):
        group["worker_url"] = f"http://127.0.0.1:{port}"
    for section, values in overrides.items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def decision(action: Action, *groups: str, target: int = 0) -> Decision:
    reason = Reason.UTILIZATION_HIGH if action is Action.SCALE_UP else Reason.SURPLUS
    return Decision(action, target, groups[0] if groups else None, reason, "test", {}, groups=tuple(groups))


def kill_workers(urls: list[str]) -> None:
    """SIGKILL whatever emulated worker answers at each URL (by the pid it reports)."""
    for url in urls:
        with contextlib.suppress(Exception):
            pid = int(httpx.get(url + "/_emulator/state", timeout=1.0).json()["pid"])
            os.kill(pid, signal.SIGKILL)


@dataclass
class LiveFleet:
    policy_path: Path
    db_url: str
    gateway_url: str
    api_key: str | None = None
    epoch: int = 1
    ledger: Ledger = field(init=False)
    executor: Executor = field(init=False)

    def __post_init__(self) -> None:
        self.loaded = load_policy(self.policy_path)
        self.policy = self.loaded.policy
        self.ledger = Ledger(self.db_url)
        self.live = LiveLedger(self.ledger)
        self.run_id = self.ledger.start_run("live", self.loaded, at=time.time(), label="test")
        self.gateway = GatewayClient(self.gateway_url, api_key=self.api_key)
        self.actuator = LocalActuator(self.policy, log_dir=str(self.policy_path.parent / "workers"),
                                      owner=self.live.fleet_id(epoch=self.epoch))
        self.probe = WorkerProbe(metric_prefix=self.policy.signals.metric_prefix)
        self.executor = Executor(self.policy, self.live, self.gateway, self.actuator, self.probe,
                                 run_id=self.run_id, epoch=self.epoch)

    @property
    def urls(self) -> list[str]:
        return [g.worker_url for g in self.policy.fleet.groups]

    def url(self, group: str) -> str:
        return next(g.worker_url for g in self.policy.fleet.groups if g.name == group)

    def phase(self, group: str) -> str:
        return self.executor.records[group].phase

    def reconcile_until(self, predicate, deadline_s: float, *, what: str, interval_s: float = 0.3):
        end = time.monotonic() + deadline_s
        reports = []
        while True:
            reports.append(self.executor.reconcile())
            if predicate():
                return reports
            if time.monotonic() > end:
                phases = {n: r.phase for n, r in self.executor.records.items()}
                raise AssertionError(f"{what}: not within {deadline_s} s; phases {phases}; last steps "
                                     f"{[s for r in reports[-5:] for s in r.steps]}")
            time.sleep(interval_s)

    def start(self, *groups: str, deadline_s: float = 40.0) -> None:
        self.executor.apply(decision(Action.SCALE_UP, *groups))
        self.reconcile_until(lambda: all(self.phase(g) == "ready" for g in groups), deadline_s,
                             what=f"{groups} ready")

    def drain(self, group: str, deadline_s: float = 60.0) -> None:
        self.executor.apply(decision(Action.SCALE_DOWN, group))
        self.reconcile_until(lambda: self.phase(group) == "off", deadline_s, what=f"{group} drained and off")

    def running(self, group: str) -> bool:
        return self.actuator.status(self.executor.group(group))[0] is GroupStatus.RUNNING

    def close(self) -> None:
        # The actuator's own workers by their pids (one still importing answers no URL), then
        # whatever answers at the fleet's URLs.
        for child in list(self.actuator._children.values()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                child.wait(timeout=5)
        kill_workers(self.urls)
        for url in self.urls:
            port = int(url.rsplit(":", 1)[1])
            end = time.monotonic() + 10
            while port_open("127.0.0.1", port) and time.monotonic() < end:
                time.sleep(0.05)
        self.actuator.close()
        self.gateway.close()
        self.probe.close()
        self.ledger.close()


class StreamingLoad:
    """Streaming chat requests through the gateway from a thread, at most ``concurrency`` open,
    bounded by ``max_requests`` and ``max_seconds``. ``stop()`` lets the open ones finish."""

    def __init__(self, gateway_url: str, *, concurrency: int = 4, max_tokens: int = 30, max_requests: int = 2000,
                 max_seconds: float = 240.0, sessions: int = 12) -> None:
        self.url = gateway_url + "/v1/chat/completions"
        self.concurrency, self.max_tokens = concurrency, max_tokens
        self.max_requests, self.max_seconds, self.sessions = max_requests, max_seconds, sessions
        self.results: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> StreamingLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _one(self, i: int) -> None:
        session = i % self.sessions
        body = {"model": "MiniMaxAI/MiniMax-M2.5", "stream": True, "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": f"session {session}: " + "tell me about the fleet " * 20}]}
        self.results.append(await stream_post(self.url, body, timeout_s=120))

    async def _main(self) -> None:
        t0 = time.monotonic()
        open_tasks: set[asyncio.Task] = set()
        sent = 0
        while not self._stop.is_set() and sent < self.max_requests and time.monotonic() - t0 < self.max_seconds:
            while len(open_tasks) < self.concurrency and sent < self.max_requests:
                open_tasks.add(asyncio.create_task(self._one(sent)))
                sent += 1
            done, open_tasks = await asyncio.wait(open_tasks, timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
        if open_tasks:
            await asyncio.wait(open_tasks, timeout=150)

    def stop(self) -> list:
        self._stop.set()
        self._thread.join(timeout=180)
        return self.results

    @staticmethod
    def failures(results: list) -> list:
        return [r for r in results if r.status != 200 or not r.done or r.error]


def active_node_seconds(engine, nodes: tuple[str, ...], *, run_id: int | None = None) -> float:
    """Seconds the ledger charged each of ``nodes`` as active (an open interval counts to now),
    averaged over them; every run, or only ``run_id``."""
    from sqlalchemy import text

    from autoscaler.ledger.models import EpochTime

    query = "SELECT node, start_at, end_at FROM node_intervals WHERE state = 'active'"
    params: dict = {}
    if run_id is not None:
        query, params = query + " AND run_id = :r", {"r": run_id}
    with engine.connect() as conn:
        rows = conn.execute(text(query), params).all()
    conv, now = EpochTime(), time.time()
    total = 0.0
    for node, start, end in rows:
        if node in nodes:
            begin = conv.process_result_value(start, engine.dialect)
            total += (conv.process_result_value(end, engine.dialect) if end is not None else now) - begin
    return total / len(nodes)
