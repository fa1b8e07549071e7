"""The executor against the real SGLang Model Gateway (sglang-router 0.3.2) and emulated groups
started through the ``local`` actuator, with continuous streaming load.

One gateway serves the whole module (its workers are cleared between tests); each test has its
own ledger, its own policy on free ports and its own workers, killed by their PIDs at the end.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from sqlalchemy import text

from autoscaler.actuators.local import port_open
from autoscaler.adapters.gateway import GatewayClient, GatewayUnauthorized
from autoscaler.core.types import Action, Phase
from autoscaler.errors import RuntimeFailure
from autoscaler.ledger.live import LiveLedger
from autoscaler.service.executor import Executor, RecordsUnavailable
from tests.support.live import LiveFleet, StreamingLoad, active_node_seconds, decision, kill_workers, write_policy
from tests.support.procs import PYTHON, Proc, free_port, start_gateway, wait_until


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = start_gateway(tmp_path_factory.mktemp("gateway"))
    try:
        yield g
    finally:
        g.proc.kill()


@pytest.fixture
def fleet(tmp_path, gw):
    for w in gw.workers():  # a clean gateway for every test
        httpx.delete(f"{gw.url}/workers/{w['id']}", timeout=5)
    made: list[LiveFleet] = []

    def make(**overrides) -> LiveFleet:
        policy = write_policy(tmp_path / f"policy-{len(made)}.yaml", **overrides)
        f = LiveFleet(policy, f"sqlite:///{tmp_path}/ledger.db", gw.url)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def events(fleet: LiveFleet, group: str) -> list[str]:
    return [e.event for e in fleet.ledger.events(fleet.run_id) if e.group == group]


def test_scale_1_to_3_to_1_under_streaming_load_loses_no_request(fleet, gw):
    f = fleet()
    f.start("g1")
    with StreamingLoad(gw.url, concurrency=6, max_tokens=40) as load:
        wait_until(lambda: len(load.results) >= 3, 60, what="first requests done")
        f.start("g2", "g3")
        assert {w["url"] for w in gw.workers()} == set(f.urls)
        wait_until(lambda: len(load.results) >= 15, 90, what="load on three groups")
        f.drain("g3")
        f.drain("g2")
        time.sleep(2)
        results = load.stop()
    assert len(results) >= 15
    assert StreamingLoad.failures(results) == []
    assert [f.phase(g) for g in ("g1", "g2", "g3")] == ["ready", "off", "off"]
    assert not f.running("g2") and not f.running("g3")  # the drained groups' ports are closed
    assert [w["url"] for w in gw.workers()] == [f.url("g1")]
    # Intent before the act, result after it, for every side effect.
    actions = f.live.actions()
    assert {a["kind"] for a in actions} >= {"start", "register", "deregister", "stop"}
    assert all(a["outcome"] == "ok" and a["result_at"] >= a["intent_at"] for a in actions)
    assert events(f, "g3") == ["started", "registering", "ready", "drain_started", "drained", "stopping", "stopped"]
    # The measured start-ups are reported for the core's lead time.
    # Node intervals: g3's nodes active while on, then off (the local actuator's power state).
    states = [iv.state for iv in f.ledger.intervals_at(f.run_id, time.time()) if iv.group == "g3"]
    assert states == ["off", "off"]


def test_a_start_reports_its_measured_duration(fleet):
    f = fleet()
    f.executor.apply(decision(Action.SCALE_UP, "g1"))
    reports = f.reconcile_until(lambda: f.phase("g1") == "ready", 40, what="g1 ready")
    samples = [s for r in reports for s in r.startup_samples]
    # actuator.startup_s is 5 s in demo.yaml: health is 503 for 5 s, then registration.
    assert len(samples) == 1 and 5.0 <= samples[0] < 30.0


def test_sigkill_mid_drain_then_restart_completes_the_drain_and_loses_nothing(fleet, gw, tmp_path):
    f = fleet(drain={"settle_s": 2, "timeout_s": 180, "on_timeout": "stop"})
    f.start("g1", "g2")
    db = f.db_url
    # Long streams (500 tokens at 20/s: 25 s) so that the drain has work in flight when the
    # controller dies, also when the driver takes seconds to start on a loaded machine.
    with StreamingLoad(gw.url, concurrency=8, max_tokens=500, max_requests=16) as load:
        wait_until(lambda: _in_flight(f.url("g2")) >= 1, 30, what="g2 busy")
        driver = Proc([PYTHON, "-m", "tests.support.executor_driver", "--policy", str(f.policy_path), "--db", db,
                       "--gateway", gw.url, "--drain", "g2", "--ticks", "1000"], tmp_path / "driver1.log")
        try:
            wait_until(lambda: f.url("g2") not in {w["url"] for w in gw.workers()}, 20,
                       what="g2 removed from the gateway", proc=driver)
            assert _in_flight(f.url("g2")) >= 1  # still draining when the controller dies
            driver.signal(signal.SIGKILL)
            driver.wait(10)
        finally:
            driver.kill()
        # The records still say draining; the worker still runs and finishes its requests.
        assert LiveLedger(f.ledger).groups()["g2"].phase == "draining"
        restarted = Proc([PYTHON, "-m", "tests.support.executor_driver", "--policy", str(f.policy_path), "--db", db,
                          "--gateway", gw.url, "--until-off", "g2", "--ticks", "1000"], tmp_path / "driver2.log")
        try:
            assert restarted.wait(120) == 0, restarted.log()
        finally:
            restarted.kill()
        results = load.stop()
    assert StreamingLoad.failures(results) == []
    records = LiveLedger(f.ledger).groups()
    assert records["g2"].phase == "off"
    # Nothing the records call off is still running.
    for name, rec in records.items():
        if rec.phase == "off":
            assert not port_open("127.0.0.1", int(f.url(name).rsplit(":", 1)[1])), name
    assert "drained" in [e.event for run in f.ledger.runs(source="live") for e in f.ledger.events(run.id)
                         if e.group == "g2"]


def _in_flight(url: str) -> float:
    from autoscaler.adapters.worker_probe import WorkerProbe

    probe = WorkerProbe()
    try:
        return probe.load(url).in_flight or 0
    finally:
        probe.close()


def test_gateway_unreachable_during_a_drain_never_stops_a_group_that_may_be_registered(fleet, gw):
    f = fleet(drain={"timeout_s": 3, "on_timeout": "stop", "settle_s": 1})
    f.start("g1", "g2")
    real = f.executor.gateway
    dead = GatewayClient(f"http://127.0.0.1:{_closed_port()}", timeout_s=0.5)
    f.executor.gateway = dead
    f.executor.apply(decision(Action.SCALE_DOWN, "g2"))
    deadline = time.monotonic() + 6  # twice the drain timeout
    while time.monotonic() < deadline:
        report = f.executor.reconcile()
        assert not report.gateway_ok
        time.sleep(0.3)
    # Still listed by the real gateway, so it must still run: it was never stopped blind.
    assert f.phase("g2") == "draining"
    assert f.url("g2") in {w["url"] for w in gw.workers()}
    assert f.running("g2")
    assert any("gateway is unreachable" in a for a in report.alerts)
    f.executor.gateway = real  # the gateway is back: the drain goes on
    f.reconcile_until(lambda: f.phase("g2") == "off", 30, what="g2 off once the gateway answers")
    assert f.url("g2") not in {w["url"] for w in gw.workers()}
    dead.close()


def _closed_port() -> int:
    from tests.support.procs import free_port

    return free_port()


def test_a_restarted_gateway_gets_every_ready_group_back_within_one_tick(fleet, tmp_path):
    g = start_gateway(tmp_path / "gw2")
    _port, _mport = g.port, g.metrics_port
    f = fleet()
    f.executor.gateway = GatewayClient(g.url)
    g2: Proc | None = None
    try:
        f.start("g1", "g2")
        g.proc.kill()
        argv = list(g.proc.argv)
        g2 = Proc(argv, tmp_path / "gw2" / "restarted.log")
        wait_until(lambda: httpx.get(g.url + "/liveness", timeout=1).status_code == 200, 20, what="gateway back",
                   proc=g2)
        assert httpx.get(g.url + "/workers", timeout=5).json()["workers"] == []  # it forgot them
        report = f.executor.reconcile()  # one tick
        assert sorted(s for s in report.steps if "re-registered" in s) == ["g1: re-registered with the gateway",
                                                                           "g2: re-registered with the gateway"]
        wait_until(lambda: {w["url"] for w in httpx.get(g.url + "/workers", timeout=5).json()["workers"]}
                   == {f.url("g1"), f.url("g2")}, 15, what="both listed again")
        assert events(f, "g1").count("reregistered") == 1
    finally:
        g.proc.kill()
        if g2 is not None:
            g2.kill()


def test_a_start_that_never_becomes_healthy_is_cleaned_up_retried_with_backoff_then_cordoned(fleet):
    f = fleet(actuator={"kind": "local", "startup_s": 60},
              lifecycle={"health_deadline_s": 1.5, "start_retries": 1, "retry_backoff_s": 1, "retry_backoff_max_s": 5})
    f.executor.apply(decision(Action.SCALE_UP, "g1"))
    assert f.phase("g1") == "starting"
    f.reconcile_until(lambda: f.phase("g1") == "failed", 20, what="g1 failed")
    rec = f.executor.records["g1"]
    assert rec.attempts == 1 and rec.retry_at is not None and not rec.cordoned
    assert "no healthy /health within 1.5 s" in rec.cause
    wait_until(lambda: not f.running("g1"), 10, what="the unhealthy worker stopped")
    # During the backoff the core sees it as failed: not a start candidate.
    assert f.executor.fleet_state().groups["g1"].phase is Phase.FAILED
    f.reconcile_until(lambda: f.phase("g1") == "off", 10, what="g1 startable after the backoff")
    f.executor.apply(decision(Action.SCALE_UP, "g1"))
    f.reconcile_until(lambda: f.executor.records["g1"].cordoned, 20, what="g1 cordoned after the last retry")
    assert f.executor.fleet_state().groups["g1"].phase is Phase.FAILED
    assert events(f, "g1") == ["started", "failed", "started", "failed", "cordoned"]
    f.executor.cordon("g1", False, "operator uncordon")
    assert f.executor.records["g1"].attempts == 0 and not f.executor.records["g1"].cordoned
    # off once its status reads stopped (a failed group is charged until then), at the next reconcile
    f.reconcile_until(lambda: f.phase("g1") == "off", 10, what="g1 off after the uncordon")


def test_a_ready_group_whose_health_fails_is_failed_removed_and_replaced(fleet, gw):
    # The gateway's word aside (grace 0: the gateway's own checks run only every 60 s here).
    f = fleet(lifecycle={"health_failures_before_failed": 2, "retry_backoff_s": 60, "health_gateway_grace_s": 0})
    f.start("g1", "g2")
    httpx.post(f.url("g1") + "/_emulator/fault", json={"health": "fail"}, timeout=5)
    f.reconcile_until(lambda: f.phase("g1") == "failed", 10, what="g1 failed")
    assert "/health failed 2 probe(s) in a row" in f.executor.records["g1"].cause
    assert f.url("g1") not in {w["url"] for w in gw.workers()}
    # taken down like a drain: out of the gateway, then stopped once its own in-flight count is 0
    f.reconcile_until(lambda: not f.running("g1"), 15, what="g1 stopped")
    # The core sees it failed (not capacity) and replaces it when the rest cannot carry the load.
    assert f.executor.fleet_state().groups["g1"].phase is Phase.FAILED
    # The health budget (1 group failed for /health at once) is spent, and g2 is the last serving:
    # its own failed probes keep it in service, with an alert.
    httpx.post(f.url("g2") + "/_emulator/fault", json={"health": "fail"}, timeout=5)
    reports = [f.executor.reconcile() for _ in range(4)]
    assert f.phase("g2") == "ready" and f.executor.records["g2"].health_failures >= 3
    assert any("g2: /health failed" in a and "kept in service" in a for r in reports for a in r.alerts)


def test_a_fleet_wide_health_blip_takes_no_group_down(fleet, gw):
    # Issue 34 item 3: /health fails on every ready worker for about 4 s while the gateway still lists
    # them healthy. Before: all three failed and removed at the same tick; nothing served for ~28 s.
    f = fleet(lifecycle={"health_failures_before_failed": 2, "retry_backoff_s": 60})
    f.start("g1", "g2", "g3")
    for g in ("g1", "g2", "g3"):
        httpx.post(f.url(g) + "/_emulator/fault", json={"health": "fail"}, timeout=5)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        f.executor.reconcile()
        time.sleep(0.3)
    assert {g: f.phase(g) for g in ("g1", "g2", "g3")} == {"g1": "ready", "g2": "ready", "g3": "ready"}
    assert min(f.executor.records[g].health_failures for g in ("g1", "g2", "g3")) >= 2  # the probes did fail
    assert {w["url"] for w in gw.workers()} >= {f.url(g) for g in ("g1", "g2", "g3")}
    for g in ("g1", "g2", "g3"):
        httpx.post(f.url(g) + "/_emulator/fault", json={"health": "ok"}, timeout=5)
    f.executor.reconcile()
    assert all(f.executor.records[g].health_failures == 0 for g in ("g1", "g2", "g3"))
    # Without the gateway's word (grace 0) the last serving group is still never failed: the same
    # blip on all three keeps all three (each sees no other group serving).
    f.executor.policy = f.policy.model_copy(update={"lifecycle": f.policy.lifecycle.model_copy(
        update={"health_gateway_grace_s": 0.0})})
    for g in ("g1", "g2", "g3"):
        httpx.post(f.url(g) + "/_emulator/fault", json={"health": "fail"}, timeout=5)
    for _ in range(6):
        f.executor.reconcile()
        time.sleep(0.3)
    assert {g: f.phase(g) for g in ("g1", "g2", "g3")} == {"g1": "ready", "g2": "ready", "g3": "ready"}


def test_ledger_unwritable_no_new_action_starts_and_what_is_in_flight_finishes(fleet, gw):
    f = fleet()
    f.start("g1", "g2")

    class Broken(LiveLedger):
        broken = False

        def intent(self, **kw):
            if self.broken:
                raise RuntimeFailure("ledger database: disk I/O error (injected)")
            return super().intent(**kw)

        def transition(self, record, **kw):
            if self.broken:
                raise RuntimeFailure("ledger database: disk I/O error (injected)")
            return super().transition(record, **kw)

    broken = Broken(f.ledger)
    f.executor.live = broken
    with StreamingLoad(gw.url, concurrency=4, max_tokens=60, max_requests=12) as load:
        wait_until(lambda: _in_flight(f.url("g2")) >= 1, 30, what="g2 busy")
        broken.broken = True
        with pytest.raises(RecordsUnavailable):
            f.executor.apply(decision(Action.SCALE_UP, "g3"))
        assert not f.running("g3")  # no intent recorded -> nothing started
        with pytest.raises(RecordsUnavailable):
            f.executor.apply(decision(Action.SCALE_DOWN, "g2"))
        assert f.url("g2") in {w["url"] for w in gw.workers()}  # no drain began without its record
        broken.broken = False
        f.drain("g2")  # once writable again, a drain completes normally
        results = load.stop()
    assert StreamingLoad.failures(results) == []


def test_control_plane_key_is_used_a_wrong_key_is_one_clear_error_and_the_key_is_never_recorded(
        fleet, tmp_path, caplog):
    secret = "s3cr3t-" + os.urandom(6).hex()
    g = start_gateway(tmp_path / "gwkey", extra_args=["--control-plane-api-keys", f"ops:ops:admin:{secret}"])
    try:
        with pytest.raises(GatewayUnauthorized) as info:
            GatewayClient(g.url, api_key="wrong").list()
        assert "401" in str(info.value) and "\n" not in str(info.value) and "wrong" not in str(info.value)
        with pytest.raises(GatewayUnauthorized):
            GatewayClient(g.url).list()
        f = fleet()
        f.executor.gateway = GatewayClient(g.url, api_key=secret)
        caplog.set_level("DEBUG")
        f.start("g1")
        listed = httpx.get(g.url + "/workers", headers={"Authorization": f"Bearer {secret}"}, timeout=5).json()
        assert [w["url"] for w in listed["workers"]] == [f.url("g1")]
        f.drain("g1")
        assert secret not in caplog.text
        assert secret not in repr(f.executor.gateway)
        with f.ledger.engine.connect() as conn:
            for table in ("actions", "group_events", "fleet_groups", "controller_state", "decisions", "runs"):
                for row in conn.execute(text(f"SELECT * FROM {table}")):
                    assert secret not in str(row), table
    finally:
        g.proc.kill()


def test_a_worker_the_gateway_lists_but_the_records_call_off_is_adopted(fleet, gw, tmp_path):
    f = fleet()
    port = int(f.url("g2").rsplit(":", 1)[1])
    w = start_emulated_on(tmp_path, port)
    try:
        gw.add_worker(f.url("g2"))
        gw.wait_healthy(f.url("g2"))
        report = f.executor.reconcile()
        assert any("adopted worker" in s for s in report.steps)
        assert f.phase("g2") == "ready" and events(f, "g2") == ["adopted"]
    finally:
        w.proc.kill()


def test_unknown_worker_remove_takes_it_out_of_the_gateway(fleet, gw, tmp_path):
    f = fleet(lifecycle={"unknown_worker": "remove"})
    port = int(f.url("g3").rsplit(":", 1)[1])
    w = start_emulated_on(tmp_path, port)
    try:
        gw.add_worker(f.url("g3"))
        gw.wait_healthy(f.url("g3"))
        f.executor.reconcile()
        assert f.phase("g3") == "off"
        assert f.url("g3") not in {x["url"] for x in gw.workers()}
        assert events(f, "g3") == ["removed"]
    finally:
        w.proc.kill()


def start_emulated_on(tmp_path, port: int, **options):
    """An emulated worker on a given port (not through the actuator: something the records do not own)."""
    from tests.support.procs import Worker, wait_http

    argv = [PYTHON, "-m", "autoscaler.emulator", "worker", "--port", str(port)]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = Proc(argv, tmp_path / f"worker-{port}.log")
    wait_http(f"http://127.0.0.1:{port}/_emulator/state", 15, proc=proc)
    return Worker(proc, port, f"http://127.0.0.1:{port}")


def test_a_group_started_but_never_registered_is_registered_after_a_restart(fleet, gw):
    f = fleet()
    f.executor.apply(decision(Action.SCALE_UP, "g1"))
    assert f.phase("g1") == "starting"
    # The controller dies here; a new one reads the records and carries on.
    again = Executor(f.policy, LiveLedger(f.ledger), f.gateway, f.actuator, f.probe, run_id=f.run_id, epoch=2)
    assert again.records["g1"].phase == "starting"
    f.executor = again
    f.reconcile_until(lambda: f.phase("g1") == "ready", 40, what="g1 registered by the new controller")
    assert f.url("g1") in {w["url"] for w in gw.workers()}


def test_a_delete_during_a_pending_add_is_repeated_once_the_worker_appears(fleet, gw, tmp_path):
    # The gateway does not cancel a pending add on DELETE: the worker shows up later and must be
    # deleted again. A draining group whose add was still pending when the drain began.
    f = fleet(drain={"settle_s": 1, "timeout_s": 60, "on_timeout": "stop"})
    port = int(f.url("g2").rsplit(":", 1)[1])
    w = start_emulated_on(tmp_path, port, startup_s=4)
    try:
        worker_id = gw.add_worker(f.url("g2"))  # pending: /health answers 503 for 4 s
        rec = f.executor.records["g2"]
        for phase in ("starting", "registering", "ready", "draining"):  # the legal way to a draining record
            rec = rec.with_(phase=phase, since=time.time(), worker_id=worker_id)
            f.live.transition(rec, epoch=1, at=time.time())
        f.executor.records["g2"] = rec
        f.executor.reconcile()  # DELETE of the pending id
        assert f.executor.records["g2"].removed_at is not None
        wait_until(lambda: f.url("g2") in {x["url"] for x in gw.workers()}, 30,
                   what="the pending add appears despite the DELETE")
        f.reconcile_until(lambda: f.phase("g2") == "off", 40, what="g2 removed again, drained, stopped")
        assert f.url("g2") not in {x["url"] for x in gw.workers()}
        deletes = [a for a in f.live.actions("g2") if a["kind"] == "deregister"]
        assert len(deletes) >= 2
    finally:
        w.proc.kill()


@pytest.mark.parametrize("on_timeout", ["stop", "keep_serving"])
def test_a_drain_that_times_out_stops_and_counts_the_cut_or_keeps_serving(fleet, gw, on_timeout):
    f = fleet(drain={"settle_s": 1, "timeout_s": 3, "on_timeout": on_timeout})
    f.start("g1", "g2")
    # Long streams (400 tokens at 20 tokens/s: 20 s) outlive the 3 s drain timeout.
    with StreamingLoad(gw.url, concurrency=6, max_tokens=400, max_requests=6) as load:
        wait_until(lambda: _in_flight(f.url("g2")) >= 1, 30, what="g2 busy")
        f.executor.apply(decision(Action.SCALE_DOWN, "g2"))
        reports = f.reconcile_until(lambda: f.phase("g2") != "draining", 20, what="the drain timed out")
        if on_timeout == "stop":
            f.reconcile_until(lambda: f.phase("g2") == "off", 30, what="g2 stopped at the timeout")
            finished = [d for r in reports for d in r.drains_finished if d[0] == "g2"]
            assert finished and finished[0][2] >= 1  # the requests cut are counted
            drained = [e.detail for e in f.ledger.events(f.run_id) if e.group == "g2" and e.event == "drained"]
            assert drained and "requests cut" in drained[-1]
        else:
            f.reconcile_until(lambda: f.phase("g2") == "ready", 30, what="g2 back in service")
            assert any("kept serving" in a for r in reports for a in r.alerts)
            assert f.url("g2") in {w["url"] for w in gw.workers()}
            assert "drain_cancelled" in events(f, "g2")
        load.stop()


def test_a_ready_group_failing_health_with_the_gateway_unreadable_is_never_stopped_and_no_request_fails(fleet, gw):
    # Health failure is a drain, not a kill: the group is failed (the core replaces it), but it is
    # stopped only once it is out of the gateway and its own in-flight count is 0. While the
    # controller cannot read the gateway, it may still be registered: it keeps running.
    f = fleet(lifecycle={"health_failures_before_failed": 2, "retry_backoff_s": 60},
              drain={"settle_s": 1, "timeout_s": 120, "on_timeout": "stop"})
    f.start("g1", "g2")
    real = f.executor.gateway
    dead = GatewayClient(f"http://127.0.0.1:{_closed_port()}", timeout_s=0.5)
    with StreamingLoad(gw.url, concurrency=6, max_tokens=60, max_seconds=60) as load:
        wait_until(lambda: len(load.results) >= 4, 30, what="requests flowing")
        f.executor.gateway = dead
        httpx.post(f.url("g1") + "/_emulator/fault", json={"health": "fail"}, timeout=5)
        f.reconcile_until(lambda: f.phase("g1") == "failed", 15, what="g1 failed")
        for _ in range(15):  # five seconds with the gateway unreadable: never stopped blind
            f.executor.reconcile()
            time.sleep(0.3)
        assert f.running("g1") and f.executor.records["g1"].stop_issued_at is None
        assert not [a for a in f.live.actions("g1") if a["kind"] == "stop"]
        f.executor.gateway = real  # it answers again: out of the gateway, drained, then stopped
        f.reconcile_until(lambda: not f.running("g1"), 60, what="g1 stopped after its drain")
        results = load.stop()
    assert results and StreamingLoad.failures(results) == []
    assert f.url("g1") not in {w["url"] for w in gw.workers()}
    stops = [a for a in f.live.actions("g1") if a["kind"] == "stop"]
    assert len(stops) == 1 and "0 request(s) cut" in stops[0]["detail"]
    dead.close()


def test_one_failed_probe_is_not_a_failure_unless_the_gateway_also_lists_it_unhealthy(tmp_path):
    # A gateway whose own health checker is quick (every second, one failure): it lists g1
    # unhealthy soon after g1's /health starts failing.
    g = start_gateway(tmp_path / "gw", extra_args=["--health-check-interval-secs", "1",
                                                   "--health-failure-threshold", "1"])
    f = LiveFleet(write_policy(tmp_path / "p.yaml", lifecycle={"health_failures_before_failed": 3}),
                  f"sqlite:///{tmp_path}/ledger.db", g.url)
    try:
        f.start("g1")
        httpx.post(f.url("g1") + "/_emulator/fault", json={"health": "fail"}, timeout=5)
        f.executor.reconcile()
        # One failed probe while the gateway still lists it healthy: a blip, counted, not a failure.
        assert f.phase("g1") == "ready" and f.executor.records["g1"].health_failures == 1
        wait_until(lambda: not any(w.get("is_healthy") for w in g.workers() if w["url"] == f.url("g1")), 30,
                   what="the gateway lists g1 unhealthy")
        f.executor.reconcile()  # the second failed probe of three, but the gateway agrees: failed
        assert f.phase("g1") == "failed"
        assert "the gateway also lists it unhealthy" in f.executor.records["g1"].cause
    finally:
        f.close()
        g.proc.kill()


def test_a_drain_timing_out_with_unreadable_worker_metrics_records_the_cut_as_unknown_not_0(fleet, gw):
    f = fleet(drain={"settle_s": 1, "timeout_s": 2, "on_timeout": "stop"})
    f.start("g1", "g2")
    httpx.post(f.url("g2") + "/_emulator/fault", json={"metrics": "http_500"}, timeout=5)
    f.executor.apply(decision(Action.SCALE_DOWN, "g2"))
    reports = f.reconcile_until(lambda: f.phase("g2") == "off", 30, what="g2 stopped at its drain timeout")
    finished = [d for r in reports for d in r.drains_finished if d[0] == "g2"]
    assert finished and finished[0][2] is None  # unknown, not 0
    drained = [e.detail for e in f.ledger.events(f.run_id) if e.group == "g2" and e.event == "drained"]
    assert drained and "unknown requests cut" in drained[-1]


def _active_seconds(f: LiveFleet, group: str) -> float:
    nodes = tuple(n.name for n in f.executor.group(group).nodes)
    return active_node_seconds(f.ledger.engine, nodes, run_id=f.run_id)


def test_the_status_sweep_adopts_a_running_group_the_records_call_off_and_charges_it(fleet, gw, tmp_path):
    # lifecycle.unknown_worker adopt: a worker running (not in the gateway) that the records call
    # off is taken through the start-up (health, register) and charged as active.
    f = fleet(lifecycle={"unknown_worker": "adopt", "status_sweep_s": 1})
    w = start_emulated_on(tmp_path, int(f.url("g2").rsplit(":", 1)[1]), startup_s=0)
    try:
        f.reconcile_until(lambda: f.phase("g2") == "ready", 20, what="g2 adopted and registered")
        assert "adopted" in events(f, "g2")
        assert f.url("g2") in {x["url"] for x in gw.workers()}
        time.sleep(1)
        assert _active_seconds(f, "g2") > 0.5
    finally:
        w.proc.kill()


def test_the_status_sweep_stops_an_unknown_worker_when_told_to_remove_it(fleet, gw, tmp_path):
    f = fleet(lifecycle={"unknown_worker": "remove", "status_sweep_s": 1})
    w = start_emulated_on(tmp_path, int(f.url("g3").rsplit(":", 1)[1]), startup_s=0)
    try:
        f.reconcile_until(lambda: f.phase("g3") == "off" and not f.running("g3"), 20, what="the leftover stopped")
        assert [a["kind"] for a in f.live.actions("g3")] == ["stop"]
        assert events(f, "g3")[-2:] == ["stopping", "stopped"]
        assert _active_seconds(f, "g3") > 0  # charged while it ran: from the sweep that found it to its stop
    finally:
        w.proc.kill()


def test_the_status_sweep_fails_and_replaces_a_ready_group_that_is_not_running(fleet, gw):
    f = fleet(lifecycle={"status_sweep_s": 1, "health_failures_before_failed": 100})
    f.start("g1")
    kill_workers([f.url("g1")])  # died behind the controller's back
    f.reconcile_until(lambda: f.phase("g1") == "failed", 15, what="g1 failed by the sweep")
    assert "not running" in f.executor.records["g1"].cause
    assert f.executor.fleet_state().groups["g1"].phase is Phase.FAILED  # the core replaces it
    f.reconcile_until(lambda: f.executor.node_states["g1"][0] != "active", 10, what="g1's nodes no longer charged")


def test_a_gateway_that_cannot_be_used_fires_the_register_deadline_and_never_inflates_the_start_up(fleet, gw):
    # Healthy worker, unusable gateway: the registration waits at most register_deadline_s from the
    # worker's first healthy answer, then the start fails (it is not "starting" for ever).
    f = fleet(lifecycle={"register_deadline_s": 3, "retry_backoff_s": 60})
    real = f.executor.gateway
    dead = GatewayClient(f"http://127.0.0.1:{_closed_port()}", timeout_s=0.5)
    f.executor.gateway = dead
    f.executor.apply(decision(Action.SCALE_UP, "g1"))
    reports = f.reconcile_until(lambda: f.phase("g1") == "failed", 40, what="g1 failed at the register deadline")
    assert "the gateway could not be used for 3 s" in f.executor.records["g1"].cause
    assert any("waiting" in s and "for the gateway" in s for r in reports for s in r.steps)
    assert all(not r.gateway_ok for r in reports)
    # Blocked for a while, then the gateway answers: the sample is the worker's own start-up.
    f2 = fleet(lifecycle={"register_deadline_s": 60})
    f2.executor.gateway = dead
    f2.executor.apply(decision(Action.SCALE_UP, "g2"))
    began = time.time()
    f2.reconcile_until(lambda: any("waiting" in s for s in f2.executor.reconcile().steps), 30,
                       what="g2 healthy, waiting for the gateway")
    healthy_after = time.time() - began
    time.sleep(4)  # four more seconds on an unusable gateway
    f2.executor.gateway = real
    reports = f2.reconcile_until(lambda: f2.phase("g2") == "ready", 30, what="g2 ready once the gateway answers")
    samples = [s for r in reports for s in r.startup_samples]
    assert len(samples) == 1 and samples[0] <= healthy_after + 0.5, (samples, healthy_after)
    dead.close()


def test_a_failed_group_still_running_after_its_stop_is_stopped_again_cordoned_or_not(fleet, gw):
    # Its stop failed, was cut, or never ran (a crash between the mark and the act): the records
    # say the stop was issued long ago, the worker still runs. It must not be left running.
    f = fleet(lifecycle={"status_sweep_s": 1, "stop_deadline_s": 2})
    f.start("g1")
    rec = f.executor.records["g1"]
    long_ago = time.time() - 60
    f.executor._write(rec.with_(phase="failed", since=long_ago, cordoned=True, retry_at=None, cause="test",
                                stop_issued_at=long_ago, worker_id=None), time.time(), "failed", "test")
    f.reconcile_until(lambda: not f.running("g1"), 20, what="the failed group stopped again")
    stops = [a for a in f.live.actions("g1") if a["kind"] == "stop"]
    assert stops and "again (forced)" in stops[-1]["detail"]
    f.reconcile_until(lambda: f.executor.node_states["g1"][0] != "active", 10, what="no longer charged")


def test_a_group_dropped_while_running_is_refused_at_start_and_kept_when_added_back(fleet, gw, tmp_path):
    from autoscaler.service.executor import Executor

    f = fleet()
    f.start("g3")
    smaller = write_policy(tmp_path / "two.yaml", ports=[int(u.rsplit(":", 1)[1]) for u in f.urls],
                           fleet={"ceiling_groups": 2, "groups": [g.model_dump(mode="json")
                                                                  for g in f.policy.fleet.groups[:2]]})
    from autoscaler.policy.loader import load_policy

    two = load_policy(smaller).policy
    with pytest.raises(RuntimeFailure, match=r"g3 \(ready\) may be running but the policy does not name it"):
        Executor(two, f.live, f.gateway, f.actuator, f.probe, run_id=f.run_id, epoch=1)
    # Added back by a reload (the executor had forgotten it): what the records say of it is kept
    # (ready), not a fresh "off" that the next write would find illegal against the stored row.
    del f.executor.records["g3"]
    f.executor.set_policy(f.policy)
    assert f.executor.records["g3"].phase == "ready"


def test_the_fence_refuses_an_act_of_an_older_epoch_even_to_a_leader():
    from autoscaler.service.executor import Fence

    epoch = [1]
    fence = Fence(leading=lambda: True, epoch=lambda: epoch[0])
    assert fence.may_act(1)
    epoch[0] = 3  # frozen, taken over, and back with a newer lease: the old epoch's acts are stale
    assert not fence.may_act(1) and fence.may_act(3)
    fence.cut.set()
    assert not fence.may_act(3)


def test_a_reload_that_moves_a_group_to_another_url_drops_the_probes_pool_for_the_old_one(fleet, tmp_path):
    from autoscaler.policy.loader import load_policy

    f = fleet()
    old = f.url("g2")
    f.probe.healthy(old)  # nothing listens there: the probe still keeps a pool for the URL
    assert old in f.probe.urls()
    ports = [int(u.rsplit(":", 1)[1]) for u in f.urls]
    ports[1] = free_port()
    moved = load_policy(write_policy(tmp_path / "moved.yaml", ports=ports)).policy
    f.executor.set_policy(moved)
    assert old not in f.probe.urls()
