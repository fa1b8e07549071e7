"""Powered-off nodes with the documented templates (docs/live.md: ssh + systemd, ipmitool), run with
a site's ``ssh`` and ``ipmitool`` on PATH (``tests.support.fake_site``: ssh exits 255 while a host is
off or booting; ipmitool's power-on returns at once and the host boots afterwards), the real gateway
and real emulated workers (issue 34, item 1):

- a cold start powers on, waits while the nodes boot (booting is its own step with
  ``lifecycle.boot_deadline_s``), and only then runs the ssh start: the group gets ready;
- a drain's stop powers the nodes off; the power controller's "off" says the group is off (its ssh
  status cannot answer), and it is charged as off;
- a boot that never completes fails at the boot deadline; the failed group, powered off, is
  charged as off, returns to off after its backoff and is started again.

Every worker the fake site launched is killed by its pid at the end, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from autoscaler.actuators.command import CommandActuator
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.executor import Executor
from tests.support import fake_site
from tests.support.live import decision, write_policy
from tests.support.procs import free_port, gateway

IPMI = ["ipmitool", "-I", "lanplus", "-H", "{node.name}-bmc", "-U", "admin", "-E", "chassis", "power"]
TEMPLATES = {  # docs/live.md, "command", with the power lines
    "start": ["ssh", "--", "{node.address}", "sudo", "systemctl", "start", "sglang-tp2@{group.name}"],
    "stop": ["ssh", "--", "{node.address}", "sudo", "systemctl", "stop", "sglang-tp2@{group.name}"],
    "status": ["ssh", "--", "{node.address}", "systemctl", "is-active", "--quiet", "sglang-tp2@{group.name}"],
    "power_on": IPMI + ["on"],
    "power_off": IPMI + ["soft"],
    "power_status": IPMI + ["status"],
}


def _reconcile_until(ex: Executor, predicate, deadline_s: float, what: str) -> list[str]:
    steps: list[str] = []
    end = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline_s} s; phases "
                                 f"{ {n: r.phase for n, r in ex.records.items()} }; last steps {steps[-8:]}")
        steps += ex.reconcile().steps
        time.sleep(0.3)
    return steps


def test_documented_power_templates_boot_stop_fail_and_retry(tmp_path, monkeypatch):
    ports = [free_port() for _ in range(3)]
    path = write_policy(tmp_path / "policy.yaml", ports=ports,
                        actuator={"kind": "command", **TEMPLATES, "timeout_s": 10},
                        drain={"settle_s": 0.5, "timeout_s": 30, "on_timeout": "stop"},
                        lifecycle={"boot_deadline_s": 8, "health_deadline_s": 60, "register_deadline_s": 20,
                                   "status_sweep_s": 2, "retry_backoff_s": 2, "retry_backoff_max_s": 4,
                                   "health_timeout_s": 2})
    loaded = load_policy(path)
    policy = loaded.policy
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    hosts = {n.address: n.name for g in policy.fleet.groups for n in g.nodes}
    groups = {g.name: {"port": p, "first": g.nodes[0].address} for g, p in zip(policy.fleet.groups, ports)}
    fake_site.install(bin_dir, site, boot_s=2, hosts=hosts, groups=groups)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(fake_site.SITE_ENV, str(site))
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    with gateway(tmp_path) as gw:
        gw_client, probe = GatewayClient(gw.url), WorkerProbe(health_timeout_s=2)
        actuator = CommandActuator(policy)
        ex = Executor(policy, LiveLedger(ledger), gw_client, actuator, probe,
                      run_id=ledger.start_run("live", loaded, at=time.time()), epoch=1)
        try:
            ex.init_node_states(time.time())
            assert ex.node_states["g1"][0] == "off"  # stopped_power_state: off (power_off is set)

            # 1. A cold start: power on returns at once, the hosts boot for 2 s; the ssh start waits.
            ex.apply(decision(Action.SCALE_UP, "g1"))
            assert ex.records["g1"].phase == "starting"
            _reconcile_until(ex, lambda: ex.records["g1"].phase == "ready", 40, "g1 ready after its boot")
            ssh_starts = [c for c in (site / "calls.log").read_text().splitlines() if "systemctl start" in c]
            assert ssh_starts and all(c.endswith("-> 0") for c in ssh_starts), ssh_starts  # none ran while booting

            # 2. A drain: stopped and powered off; its ssh status cannot answer, the BMC says off.
            ex.apply(decision(Action.SCALE_DOWN, "g1"))
            _reconcile_until(ex, lambda: ex.records["g1"].phase == "off", 30, "g1 off after its drain")
            assert ex.node_states["g1"][0] == "off"
            assert [fake_site.power(site, n.name) for n in ex.group("g1").nodes] == ["off", "off"]

            # 3. A boot that never completes: failed at the boot deadline (8 s), powered off, charged off,
            # back to off after its backoff (2 s), and started again.
            fake_site.set_boot_s(site, 1000)
            t0 = time.monotonic()
            ex.apply(decision(Action.SCALE_UP, "g2"))
            _reconcile_until(ex, lambda: ex.records["g2"].phase == "failed", 30, "g2 failed")
            assert time.monotonic() - t0 >= 7.5 and "did not boot within 8 s" in (ex.records["g2"].cause or "")
            _reconcile_until(ex, lambda: ex.node_states["g2"][0] == "off", 20, "the failed g2 charged off")
            _reconcile_until(ex, lambda: ex.records["g2"].phase == "off", 20, "the failed g2 back to off")
            assert ex.fleet_state().groups["g2"].phase.value == "off"  # startable again: the core retries it
            fake_site.set_boot_s(site, 1)
            ex.apply(decision(Action.SCALE_UP, "g2"))
            _reconcile_until(ex, lambda: ex.records["g2"].phase == "ready", 40, "g2 ready on its retry")
        finally:
            for pid in fake_site.worker_pids(site):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            actuator.close()
            gw_client.close()
            probe.close()
            ledger.close()


def test_autoscaler_run_with_the_power_templates_boots_the_floor_and_powers_a_cordoned_group_off(tmp_path):
    # The setting from outside: `autoscaler run` with the documented templates. Before, the
    # floor's group failed at once (ssh start while booting), and within seconds every group was failed.
    from autoscaler.cli import main as cli
    from tests.support.procs import PYTHON, Proc, wait_until
    from tests.test_fenced_acts import status

    ports = [free_port() for _ in range(3)]
    path = write_policy(tmp_path / "policy.yaml", ports=ports, actuator={"kind": "command", **TEMPLATES, "timeout_s": 10},
                        drain={"settle_s": 0.5, "timeout_s": 30, "on_timeout": "stop"},
                        lifecycle={"boot_deadline_s": 30, "health_deadline_s": 60, "register_deadline_s": 20,
                                   "status_sweep_s": 2, "health_timeout_s": 2})
    policy = load_policy(path).policy
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    fake_site.install(bin_dir, site, boot_s=3, hosts={n.address: n.name for g in policy.fleet.groups for n in g.nodes},
                      groups={g.name: {"port": p, "first": g.nodes[0].address}
                              for g, p in zip(policy.fleet.groups, ports)})
    db = f"sqlite:///{tmp_path}/ledger.db"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", fake_site.SITE_ENV: str(site)}
    try:
        with gateway(tmp_path) as gw:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [PYTHON, "-m", "autoscaler", "run", "--policy", str(path), "--db", db, "--signals", "direct",
                    "--listen", f"127.0.0.1:{port}", "--gateway", gw.url]
            with Proc(argv, tmp_path / "run.log", env=env) as proc:
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] == "ready", 60, what="g1 ready after its boot",
                           proc=proc, interval_s=0.5)
                assert not any(g["phase"] == "failed" for g in status(url)["groups"].values()), status(url)
                # Cordon g1: another group is started first (the floor), then g1 is drained, stopped and
                # powered off; the BMC's "off" says it is off.
                assert cli(["cordon", "g1", "--reason", "maintenance", "--by", "test", "--db", db]) == 0
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] == "off", 90, what="g1 off after its drain",
                           proc=proc, interval_s=0.5)
                assert [fake_site.power(site, n.name) for n in policy.fleet.groups[0].nodes] == ["off", "off"]
                groups = status(url)["groups"]
                assert not any(g["phase"] == "failed" for g in groups.values()), groups
                assert any(g["phase"] == "ready" for name, g in groups.items() if name != "g1"), groups
    finally:
        for pid in fake_site.worker_pids(site):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
