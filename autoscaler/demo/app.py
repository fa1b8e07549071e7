"""``run_demo``: start everything, replay the load, show it live, report, clean up."""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import httpx

from autoscaler.demo.ports import free_port
from autoscaler.demo.runner import (
    SETTLE_AFTER_LOAD_S,
    DemoFleet,
    Load,
    build_plan,
    cost_report,
    demo_summary,
    new_folder,
    smg_binary,
    summary_line,
    write_policy,
    write_prometheus_config,
)
from autoscaler.errors import RuntimeFailure


class View:
    """The live view: a rich table on a terminal, plain lines otherwise."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console

        self.console = Console(file=out, highlight=False)
        self.live: Any = None  # rich.live.Live on a terminal
        self.lines: list[str] = []
        self.status: dict[str, Any] = {}
        self.load = ""
        self.fleet = ""
        self._last_phases: dict[str, str] = {}
        self.started = time.monotonic()

    def __enter__(self) -> View:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def say(self, line: str) -> None:
        stamp = f"{time.monotonic() - self.started:6.1f}s"
        self.lines.append(f"{stamp}  {line}")
        self.lines = self.lines[-12:]
        if self.live is None:
            self.console.print(f"{stamp}  {line}", markup=False, soft_wrap=True)
        else:
            self.live.update(self._render())

    def update(self, status: dict[str, Any], load: str, fleet: str) -> None:
        self.status, self.load, self.fleet = status, load, fleet
        phases = {g: v.get("phase", "?") for g, v in (status.get("groups") or {}).items()}
        if phases != self._last_phases:
            if self.live is None:
                self.say("groups: " + "  ".join(f"{g} {p}" for g, p in sorted(phases.items())) + f"  | {fleet}")
            self._last_phases = phases
        if self.live is not None:
            self.live.update(self._render())

    def _render(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title="fleet-autoscaler demo", expand=False)
        table.add_column("group")
        table.add_column("phase")
        table.add_column("since")
        style = {"ready": "green", "starting": "yellow", "draining": "magenta", "stopping": "magenta",
                 "failed": "red", "off": "dim"}
        for name, g in sorted((self.status.get("groups") or {}).items()):
            phase = g.get("phase", "?")
            table.add_row(name, Text(phase, style=style.get(phase, "")), str(g.get("since", ""))[11:19])
        d = self.status.get("last_decision") or {}
        head = Text(f"load: {self.load}\nfleet: {self.fleet}\nlast decision: {d.get('action', '-')} "
                    f"({d.get('reason', '-')}): {d.get('detail', '')}")
        return Group(table, head, Text("\n".join(self.lines)))


def _decisions_since(db_path: str, last_id: int) -> list[tuple]:
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return []
    try:
        return conn.execute(
            "SELECT id, action, reason, target_groups, group_name, detail FROM decisions "
            "WHERE id > ? AND action != 'hold' ORDER BY id", (last_id,)).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _metric(text: str, name: str, label: str | None = None) -> float | None:
    for line in text.splitlines():
        if line.startswith(name) and (label is None or label in line):
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return None
    return None


def run_demo(*, minutes: float, db: str | None, json_out: bool) -> dict[str, Any]:
    out = sys.stderr if json_out else sys.stdout
    folder = new_folder()
    db_url = db or f"sqlite:///{folder / 'ledger.db'}"
    db_path = db_url.removeprefix("sqlite:///") if db_url.startswith("sqlite:///") else None
    load_s = minutes * 60.0
    fleet = DemoFleet(folder, say=lambda m: None)
    summary: dict[str, Any] = {}
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    view = View(out)
    try:
        with view:
            fleet.say = view.say
            smg = smg_binary()
            if smg is None:
                raise RuntimeFailure("demo: the gateway (smg, from sglang-router 0.3.2) is not installed; "
                                     "run scripts/bootstrap.sh")
            worker_ports = [free_port() for _ in range(3)]
            gw_port, gw_metrics, ctl_port = free_port(), free_port(), free_port()
            policy = write_policy(folder, worker_ports)
            fleet.worker_urls = [f"http://127.0.0.1:{p}" for p in worker_ports]
            view.say(f"folder {folder}; ledger {db_url}")
            gateway = fleet.spawn("gateway", [smg, "launch", "--host", "127.0.0.1", "--port", str(gw_port),
                                              "--prometheus-host", "127.0.0.1", "--prometheus-port", str(gw_metrics),
                                              "--policy", "cache_aware", "--cache-threshold", "0.5",
                                              "--balance-abs-threshold", "4"])
            gw_url = f"http://127.0.0.1:{gw_port}"
            fleet.wait_http(gw_url + "/liveness", gateway, 20, lambda r: r.status_code == 200)
            view.say(f"gateway (sglang-router 0.3.2) on {gw_url}")
            signals_args = ["--signals", "direct"]
            prom_bin = shutil.which("prometheus")
            if prom_bin:
                prom_port = free_port()
                config = write_prometheus_config(folder, worker_ports, gw_metrics, ctl_port)
                prom = fleet.spawn("prometheus", [prom_bin, f"--config.file={config}",
                                                  f"--storage.tsdb.path={folder / 'prometheus-data'}",
                                                  f"--web.listen-address=127.0.0.1:{prom_port}"])
                prom_url = f"http://127.0.0.1:{prom_port}"
                fleet.wait_http(prom_url + "/-/ready", prom, 30, lambda r: r.status_code == 200)
                signals_args = ["--signals", "prometheus", "--prometheus", prom_url]
                view.say(f"Prometheus on {prom_url}, scraping the workers every second")
            else:
                view.say("Prometheus is not installed (Debian: apt-get install prometheus): "
                         "the controller reads the workers' /metrics directly")
            controller = fleet.spawn("controller", [sys.executable, "-m", "autoscaler", "run", "--policy", str(policy),
                                                    "--db", db_url, "--gateway", gw_url,
                                                    "--listen", f"127.0.0.1:{ctl_port}", *signals_args],
                                     env={"AUTOSCALER_LOCAL_LOG_DIR": str(folder / "workers")})
            ctl_url = f"http://127.0.0.1:{ctl_port}"
            fleet.wait_http(ctl_url + "/healthz", controller, 30, lambda r: r.status_code == 200)
            view.say(f"controller (autoscaler run, policies/demo.yaml) on {ctl_url}; starting the floor's group")

            def status() -> dict[str, Any]:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    return httpx.get(ctl_url + "/status", timeout=1.0).json()
                return {}

            def poll(load_text: str, last_id: int) -> int:
                st = status()
                text = ""
                with contextlib.suppress(httpx.HTTPError):
                    text = httpx.get(ctl_url + "/metrics", timeout=1.0).text
                run_ = _metric(text, "autoscaler_fleet_requests", 'kind="running"')
                queued = _metric(text, "autoscaler_fleet_requests", 'kind="queued"')
                fleet_text = f"running {run_ if run_ is not None else '?'}, queued {queued if queued is not None else '?'}"
                if db_path:
                    for row in _decisions_since(db_path, last_id):
                        last_id = row[0]
                        view.say(f"{row[1]} -> {row[3]} groups ({row[2]}): {row[5]}")
                view.update(st, load_text, fleet_text)
                if controller.popen.poll() is not None:
                    raise RuntimeFailure(f"demo: the controller exited with {controller.popen.returncode} "
                                         f"(log {controller.log})")
                return last_id

            last_id = 0
            end = time.monotonic() + 60
            while time.monotonic() < end:  # the floor's group comes up first
                last_id = poll("waiting for the first group", last_id)
                if any(g.get("phase") == "ready" for g in (status().get("groups") or {}).values()):
                    break
                time.sleep(0.5)
            plan, speedup, factor = build_plan(policy, load_s)
            view.say(f"load: {len(plan)} streaming chat requests from one day of ServeGen m-small, "
                     f"{speedup:.0f}x faster, rescaled x{factor:.3g} to peak at 85% of 18 slots")
            load = Load(gw_url, plan, load_s)
            load.start()
            while load.running:
                last_id = poll(load.progress or "starting", last_id)
                time.sleep(0.5)
            if load.error is not None:
                raise RuntimeFailure(f"demo: the load failed: {load.error}")
            failed = sum(1 for o in load.outcomes if not o.ok)
            view.say(f"load done: {len(load.outcomes)} sent, {failed} failed; waiting for the fleet to drain "
                     "back to its floor")
            end = time.monotonic() + SETTLE_AFTER_LOAD_S
            while time.monotonic() < end:
                last_id = poll("done", last_id)
                groups = (status().get("groups") or {}).values()
                if sum(1 for g in groups if g.get("phase") != "off") <= 1:
                    break
                time.sleep(0.5)
            fleet.children[[c.name for c in fleet.children].index("controller")].stop(timeout_s=30)
            view.say("controller stopped (SIGTERM)")
        from autoscaler.ledger.store import Ledger

        with Ledger(db_url, create=False) as ledger:
            run_id = ledger.runs(source="live")[-1].id
        print(cost_report(db_url, run_id), file=out, end="")
        summary = demo_summary(db_url, run_id, load.outcomes, policy)
        print(summary_line(summary), file=out)
        return summary
    finally:
        fleet.stop_all()
        signal.signal(signal.SIGTERM, previous)
        if db is None:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"demo: logs kept in {folder}", file=sys.stderr)


__all__ = ["run_demo", "Path"]
