"""The demo's moving parts: processes on free ports, the load, the live view, the summary."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from autoscaler.demo import DEMO_POLICY, DEMO_TRACE
from autoscaler.errors import RuntimeFailure

PEAK_UTILIZATION = 0.85  # the busiest 5 minutes offer 85% of the 18 slots: past two groups (12)
SETTLE_AFTER_LOAD_S = 110.0  # after the load: time for the drains back to the floor (run <= N + 2 min)


def smg_binary() -> str | None:
    beside = Path(sys.executable).with_name("smg")
    return str(beside) if beside.exists() else shutil.which("smg")


@dataclass
class Child:
    name: str
    popen: subprocess.Popen
    log: Path

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)


@dataclass
class DemoFleet:
    folder: Path
    say: Callable[[str], None]
    children: list[Child] = field(default_factory=list)
    worker_urls: list[str] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> Child:
        log = self.folder / f"{name}.log"
        out = open(log, "ab")
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, **(env or {})}, cwd=self.folder)
        finally:
            out.close()
        child = Child(name, popen, log)
        self.children.append(child)
        return child

    def wait_http(self, url: str, child: Child, deadline_s: float, ok: Callable[[httpx.Response], bool]) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if child.popen.poll() is not None:
                tail = child.log.read_text(errors="replace")[-800:]
                raise RuntimeFailure(f"demo: {child.name} exited with {child.popen.returncode}: {tail.strip()}")
            with contextlib.suppress(httpx.HTTPError):
                if ok(httpx.get(url, timeout=1.0)):
                    return
            time.sleep(0.1)
        raise RuntimeFailure(f"demo: {child.name} not ready at {url} within {deadline_s:g} s (log {child.log})")

    def stop_workers(self) -> None:
        """The local actuator's workers outlive the controller (as a real fleet does): the demo
        stops them itself, by the PIDs they report, and waits until their ports are closed."""
        for url in self.worker_urls:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, ProcessLookupError):
                pid = int(httpx.get(url + "/_emulator/state", timeout=1.0).json()["pid"])
                os.kill(pid, signal.SIGKILL)
        for url in self.worker_urls:
            port = int(url.rsplit(":", 1)[1])
            end = time.monotonic() + 10
            while time.monotonic() < end:
                with socket.socket() as s:
                    s.settimeout(0.2)
                    if s.connect_ex(("127.0.0.1", port)) != 0:
                        break
                time.sleep(0.1)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            if child.name == "controller":
                child.stop(timeout_s=30)
        self.stop_workers()
        for child in reversed(self.children):
            child.stop()


def write_policy(folder: Path, ports: list[int]) -> Path:
    data = yaml.safe_load(DEMO_POLICY.read_text(encoding="utf-8"))
    for group, port in zip(data["fleet"]["groups"], ports):
        group["worker_url"] = f"http://127.0.0.1:{port}"
    path = folder / "demo-policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_prometheus_config(folder: Path, worker_ports: list[int], gateway_metrics: int, controller: int) -> Path:
    path = folder / "prometheus.yml"
    path.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        "  - job_name: sglang-workers\n    static_configs:\n"
        f"      - targets: [{', '.join(repr(f'127.0.0.1:{p}') for p in worker_ports)}]\n"
        "  - job_name: sglang-gateway\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{gateway_metrics}']\n"
        "  - job_name: autoscaler\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{controller}']\n",
        encoding="utf-8",
    )
    return path


def build_plan(policy_path: Path, load_s: float, seed: int = 0):
    """The demo trace, sped up to ``load_s`` seconds and rescaled to the fleet.

    The speed-up divides the trace's times; the emulated requests still take their real time.
    So the rescaling asks for PEAK_UTILIZATION / speed-up in trace time: the busiest 5 minutes
    then offer PEAK_UTILIZATION x 18 slots of concurrency in wall time (e.g. 22 h into 240 s is a
    speed-up of 330, so 0.85 / 330 of the slots in trace time)."""
    from autoscaler.emulator.loadgen import plan_requests
    from autoscaler.policy.loader import load_policy
    from autoscaler.sim.loadscale import scale_for_policy
    from autoscaler.sim.traces import load_trace

    policy = load_policy(policy_path).policy
    trace = load_trace(str(DEMO_TRACE), "servegen")
    first, last = trace.span_s
    speedup = (last - first) / load_s
    # A few minutes of emulated load keep a few hundred requests by design: no backtest warning.
    scaled, factor = scale_for_policy(trace, policy, PEAK_UTILIZATION / speedup, seed=seed, warn_few=False)
    plan = plan_requests(scaled.t_s, scaled.input_tokens, scaled.output_tokens, session=scaled.session,
                         prefix_blocks=scaled.prefix_blocks, speedup=speedup, max_requests=20_000,
                         max_seconds=load_s, seed=seed)
    return plan, speedup, factor


class Load:
    """The replay, in a thread; ``sent``/``done``/``failed`` for the view."""

    def __init__(self, gateway_url: str, plan, load_s: float) -> None:
        self.gateway_url, self.plan, self.load_s = gateway_url, plan, load_s
        self.outcomes: list = []
        self.progress = ""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="demo-load", daemon=True)

    def _run(self) -> None:
        from autoscaler.emulator.loadgen import replay

        def progress(msg: str) -> None:
            self.progress = msg.replace("emulate load: ", "")

        try:
            self.outcomes = asyncio.run(replay(self.gateway_url, self.plan, max_seconds=self.load_s,
                                               request_timeout_s=150.0, progress=progress, progress_every_s=1.0))
        except BaseException as exc:  # noqa: BLE001 - reported by the demo, not swallowed
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


def demo_summary(db_url: str, run_id: int, outcomes: list, policy_path: Path) -> dict[str, Any]:
    """The one-line summary (INTERFACES: demo --json keys)."""
    from sqlalchemy import text

    from autoscaler.ledger.store import Ledger
    from autoscaler.policy.loader import load_policy

    policy = load_policy(policy_path).policy
    with Ledger(db_url, create=False) as ledger:
        with ledger.engine.connect() as conn:
            starts = conn.execute(text(
                "SELECT d.reason FROM group_events e JOIN decisions d ON d.id = e.decision_id "
                "WHERE e.run_id = :r AND e.event = 'started' ORDER BY e.at"), {"r": run_id}).scalars().all()
            drains = conn.execute(text(
                "SELECT count(*) FROM group_events WHERE run_id = :r AND event = 'drained'"), {"r": run_id}).scalar()
            run = conn.execute(text("SELECT started_at, ended_at FROM runs WHERE id = :r"), {"r": run_id}).first()
        info = next(r for r in ledger.runs(run_id=run_id))
        data = ledger.period_data([info], info.started_at, info.ended_at or time.time())
    from autoscaler.ledger.cost import moment, usage_between

    end = info.ended_at or time.time()
    usage = usage_between(data.intervals[run_id], data.tokens[run_id], moment(info.started_at), moment(end), moment(end))
    node_hours = float(usage.node_s["active"]) / 3600
    span_h = (end - info.started_at) / 3600
    baseline = policy.fleet.ceiling_groups * policy.fleet.group_size_nodes * span_h
    # The floor's first start is not load-driven: skip the first below_floor start.
    load_starts = list(starts)
    if load_starts and load_starts[0] == "below_floor":
        load_starts = load_starts[1:]
    del run
    return {
        "requests_sent": len(outcomes),
        "requests_failed": sum(1 for o in outcomes if not o.ok),
        "scale_ups": len(load_starts),
        "scale_downs": int(drains or 0),
        "node_hours": round(node_hours, 4),
        "baseline_node_hours": round(baseline, 4),
        "savings_pct": round(100.0 * (1 - node_hours / baseline), 2) if baseline > 0 else None,
    }


def summary_line(summary: dict[str, Any]) -> str:
    """The demo's last line. Its saving is of node-hours (as ``simulate``'s); the cost report above
    it gives the saving in money, which is smaller: stopped nodes still draw idle or off power."""
    return (f"demo: {summary['requests_sent']} requests sent, {summary['requests_failed']} failed; "
            f"{summary['scale_ups']} scale-ups, {summary['scale_downs']} scale-downs; "
            f"{summary['node_hours']:.4f} node-hours vs {summary['baseline_node_hours']:.4f} always on "
            f"({summary['savings_pct']}% of node-hours saved; in money, the report above: 'Var %' of variable "
            f"cost, smaller since stopped nodes still draw power, and 'Total %' of total cost)")


def cost_report(db_url: str, run_id: int) -> str:
    from autoscaler.cli import main as cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli(["report", "--db", db_url, "--run", str(run_id), "--by", "day"])
    if code != 0:
        return f"(the cost report failed with exit code {code})\n"
    return buf.getvalue()


def new_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="autoscaler-demo-"))


def dump(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "))
