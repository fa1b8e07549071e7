"""`autoscaler why` for every lifecycle event the live side records, and after a restart.

Issue 35, item 15: `why` crashed with a KeyError for a group whose last event was ``cordoned`` or
``stopping`` (its phase table knew only the backtest's events). "Also expected": `why` and
`status` agree on when a group entered its phase after the controller restarted (a new run).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from autoscaler.cli import main
from autoscaler.core.types import iso
from autoscaler.ledger.models import GROUP_EVENTS
from autoscaler.ledger.store import Ledger
from autoscaler.ledger.why import KEEPS_PHASE, PHASE_AFTER
from autoscaler.service.status import build_status
from tests.support.ledger_runs import NODES, T0, default_policy
from tests.support.live import LiveFleet, write_policy
from tests.support.procs import gateway


def why_json(capsys, url, *args):
    assert main(["why", "--db", url, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_recorded_event_has_a_phase_or_keeps_it():
    assert set(PHASE_AFTER) | KEEPS_PHASE == set(GROUP_EVENTS)
    assert not set(PHASE_AFTER) & KEEPS_PHASE


# (events of g3 after it was off, each one minute apart; the phase and "since" minute `why` must give)
LIVE_LIVES = [
    (["started", "registering"], "starting", 2, True),
    (["started", "registering", "ready", "cordoned"], "ready", 3, True),
    (["started", "registering", "ready", "drain_started", "stopping"], "stopping", 5, True),
    (["started", "registering", "ready", "drain_started", "stopping", "stopped", "uncordoned"], "off", 6, False),
    (["started", "registering", "ready", "reregistered"], "ready", 3, True),
    (["started", "failed", "cordoned"], "failed", 2, True),
    (["removed"], "off", 0, False),
    (["adopted"], "starting", 1, True),
]


@pytest.mark.parametrize("lifecycle, phase, since_min, on", LIVE_LIVES, ids=[ls[0][-1] + str(i) for i, ls in
                                                                           enumerate(LIVE_LIVES)])
def test_why_answers_for_every_live_event(tmp_path, capsys, lifecycle, phase, since_min, on):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    with Ledger(url) as ledger:
        run = ledger.start_run("live", default_policy(), at=T0, label="prod")
        for g in ("g1", "g2"):
            ledger.set_group_state(run, g, "active", at=T0)
        ledger.set_group_state(run, "g3", "off", at=T0)
        for minute, event in enumerate(lifecycle, start=1):
            at = T0 + 60 * minute
            state = {"started": "active", "adopted": "active", "stopped": "off"}.get(event)
            if event == "failed":
                state = None  # a failed group's nodes stay charged as active until its status reads stopped
            ledger.record_event(run, at, "g3", event, node_state=state, detail=f"{event} detail")
    answer = why_json(capsys, url, "--at", iso(T0 + 600), "--group", "g3")
    (g3,) = answer["groups"]
    assert (g3["phase"], g3["on"]) == (phase, on)
    assert g3["since"] == iso(T0 + 60 * since_min if since_min else T0)
    if lifecycle[-1] == "cordoned":
        assert f"It was cordoned at {iso(T0 + 60 * len(lifecycle))}: cordoned detail." in g3["explanation"]
    assert main(["why", "--db", url, "--at", iso(T0 + 600)]) == 0  # the text form too
    assert f"g3 was {'ON' if on else 'OFF'} ({phase} since" in capsys.readouterr().out


def test_a_restarted_run_carries_the_phase_and_its_cause(tmp_path, capsys):
    """Run 1 started g3 by a decision; the controller restarted (run 2 supersedes run 1) with g3
    still ready. `why` in run 2 says ready since g3's own ready event, names run 1's decision, and
    counts only run 2's decisions."""
    from tests.support.ledger_runs import make_decision

    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Ledger(url) as ledger:
        run1 = ledger.start_run("live", default_policy(), at=T0, label="prod")
        for g in ("g1", "g2", "g3"):
            ledger.set_group_state(run1, g, "active" if g == "g1" else "off", at=T0)
        d = ledger.record_decision(run1, T0 + 60, make_decision("scale_up", "utilization_high", 2, "g3", 5.0, 1))
        ledger.record_event(run1, T0 + 60, "g3", "started", decision_id=d)
        ledger.record_event(run1, T0 + 120, "g3", "registering")
        ledger.record_event(run1, T0 + 180, "g3", "ready")
        run2 = ledger.start_run("live", default_policy(), at=T0 + 3600, label="prod")  # the restart
        for g in ("g1", "g3"):
            ledger.set_group_state(run2, g, "active", at=T0 + 3600)
        ledger.set_group_state(run2, "g2", "off", at=T0 + 3600)
        ledger.record_decision(run2, T0 + 3660, make_decision("hold", "steady", 2, None, 5.0, 2))
    answer = why_json(capsys, url, "--at", iso(T0 + 3700), "--group", "g3")
    (g3,) = answer["groups"]
    assert answer["run"]["id"] == run2
    assert (g3["phase"], g3["since"]) == ("ready", iso(T0 + 180))
    assert g3["cause"]["id"] == d
    assert f"(in live run {run1}, before the restart that began run {run2}" in g3["explanation"]
    assert g3["holds_since"] == {"steady": 1} and g3["counted_from"] == iso(T0 + 3600)


@pytest.fixture
def gw(tmp_path):
    with gateway(tmp_path / "gateway") as g:  # killed by its process group at the end
        yield g


def test_real_fleet_cordoned_group_and_a_restart_why_agrees_with_status(tmp_path, capsys, gw):
    """The real executor (local actuator, emulated worker, the real gateway) starts g1 and cordons
    it (its last event: ``cordoned``); `why` answers. Then a second executor on the same ledger (a
    restarted controller: a new run) leaves g1 ready: `why` and `status` give the same `since`."""
    policy = write_policy(tmp_path / "policy.yaml")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    first = LiveFleet(policy, url, gw.url)
    second = None
    try:
        first.start("g1")
        first.executor.cordon("g1", True, "operator cordon by ops: disk check")
        assert [e.event for e in first.ledger.events(first.run_id, group="g1")][-1] == "cordoned"
        now = time.time()
        g1 = why_json(capsys, url, "--at", iso(now), "--group", "g1")["groups"][0]
        assert (g1["phase"], g1["on"]) == ("ready", True)
        assert "It was cordoned at" in g1["explanation"] and "disk check" in g1["explanation"]
        first.executor.cordon("g1", False, "operator uncordon")
        first.ledger.close()
        time.sleep(1.1)  # the restart is a later second than g1's ready event
        second = LiveFleet(policy, url, gw.url, epoch=2)
        second.executor.init_node_states(time.time())
        second.executor.reconcile()
        assert second.phase("g1") == "ready"
        status = build_status(second.ledger.engine, time.time())["groups"]["g1"]
        answer = why_json(capsys, url, "--at", iso(time.time()), "--group", "g1")
        assert answer["run"]["id"] == second.run_id != first.run_id
        g1 = answer["groups"][0]
        assert (g1["phase"], g1["since"]) == (status["phase"], status["since"]), (g1, status)
        assert httpx.get(first.url("g1") + "/health", timeout=5).status_code == 200
    finally:
        for f in (second, first):
            if f is not None:
                f.close()


__all__ = ["NODES"]
