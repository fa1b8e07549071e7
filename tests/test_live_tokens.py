"""A live run records the tokens its workers served (issue 35, item 5), so a live report's cost
per million tokens is filled.

Real processes: the controller (``Controller``, as ``autoscaler run`` builds it) with the local
actuator starting an emulated worker, the real gateway, streaming requests through it; the
ledger's token counts are compared with the worker's own counters. ``TokenMeter``'s counter rules
(baseline, restart, a group started in the run) are table-tested without processes.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from autoscaler.actuators import actuator_for
from autoscaler.adapters.direct_signals import DirectSignals, parse_exposition
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.cli import main
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.controller import Controller
from autoscaler.service.executor import Executor
from autoscaler.service.tokens import TokenMeter
from tests.support.live import StreamingLoad, kill_workers, write_policy
from tests.support.procs import gateway, wait_until


def counters(url: str) -> tuple[float, float]:
    values = parse_exposition(httpx.get(url + "/metrics", timeout=5).text, "sglang:")[0]
    return sum(values["sglang:prompt_tokens_total"]), sum(values["sglang:generation_tokens_total"])


@pytest.fixture
def gw(tmp_path):
    with gateway(tmp_path / "gateway") as g:  # killed by its process group at the end
        yield g


def test_a_live_run_records_what_its_workers_served(tmp_path, gw, capsys):
    policy_path = write_policy(tmp_path / "policy.yaml")
    loaded = load_policy(policy_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    made: list[Executor] = []

    def executor_factory(policy, live, run_id, epoch):
        actuator = actuator_for(policy, fleet_id=live.fleet_id(epoch=epoch))
        probe = WorkerProbe(metric_prefix=policy.signals.metric_prefix)
        made.append(Executor(policy, live, GatewayClient(gw.url), actuator, probe, run_id=run_id, epoch=epoch))
        return made[-1]

    signals = DirectSignals(loaded.policy)
    worker = loaded.policy.fleet.groups[0].worker_url
    try:
        controller = Controller(loaded, ledger, signals, executor_factory=executor_factory, source="live")
        # the floor (1 group) is started by the core and registered with the gateway
        wait_until(lambda: controller.tick() is not None and made[0].records["g1"].phase == "ready", 90,
                   what="g1 ready", interval_s=0.5)
        with StreamingLoad(gw.url, concurrency=3, max_tokens=30, max_requests=9) as load:
            while len(load.results) < 9:
                controller.tick()
                time.sleep(0.3)
        assert StreamingLoad.failures(load.results) == []
        controller.tick()  # a reading after the last request finished
        served = counters(worker)
        assert served[0] > 0 and served[1] > 0
        controller.end("test done")  # flushes what was not yet recorded
        run_id = controller.run_id
    finally:
        for ex in made:
            ex.actuator.close()
            ex.gateway.close()
            ex.probe.close()
        kill_workers([g.worker_url for g in loaded.policy.fleet.groups])
        signals.close()
    rows = [t for ts in ledger.period_data(ledger.runs(run_id=run_id), 0, 4e9).tokens.values() for t in ts]
    ledger.close()
    assert rows and all(t.group == "g1" for t in rows)
    # g1's worker was started in this run: everything it counted is this run's, to the token
    assert (sum(t.prompt_tokens for t in rows), sum(t.generation_tokens for t in rows)) == served
    assert main(["report", "--db", url, "--run", str(run_id), "--format", "json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert (totals["prompt_tokens"], totals["generation_tokens"]) == served
    assert totals["cost_per_million_tokens"] is not None and totals["cost_per_million_tokens"] > 0


class Recorded:
    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __call__(self, start, end, prompt, generation, group) -> None:
        self.rows.append((start, end, prompt, generation, group))


def test_the_meter_counts_a_baseline_a_new_worker_and_a_restart():
    readings = {"u1": (1000.0, 100.0), "u2": (50.0, 5.0)}
    rec = Recorded()
    meter = TokenMeter(lambda url: readings.get(url), rec, flush_s=60)
    groups = ["g1", "g2"]
    meter.observe(0, {"g1": "u1"}, groups)  # g1 serving before the meter started: a baseline; g2 off
    readings["u1"] = (1300.0, 130.0)
    meter.observe(30, {"g1": "u1", "g2": "u2"}, groups)  # g1 +300/+30; g2 new since seen off: 50/5 in full
    readings["u1"] = (20.0, 2.0)  # g1's worker restarted: 20/2 since
    meter.observe(61, {"g1": "u1", "g2": "u2"}, groups)  # 61 s after the first: flush
    assert sorted(rec.rows, key=lambda r: r[4]) == [(0, 61, 320, 32, "g1"), (30, 61, 50, 5, "g2")]
    readings["u2"] = None  # unreadable: kept for later
    meter.observe(90, {"g1": "u1", "g2": "u2"}, groups)
    readings["u2"] = (80.0, 8.0)
    meter.observe(130, {"g1": "u1", "g2": "u2"}, groups)
    assert rec.rows[-1] == (61, 130, 30, 3, "g2")
