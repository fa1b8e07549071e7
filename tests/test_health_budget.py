"""The disruption budget of health (issue 34 item 3), as a table: which ready group whose /health
failed may be failed now, given what the records say of the others. The live tests
(tests/test_executor_live.py) run the same rule against the real gateway and workers."""

from __future__ import annotations

import time

import pytest

from autoscaler.ledger.live import GroupRecord, LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.executor import HEALTH_CAUSE, Executor
from tests.support.live import write_policy


class _NoActuator:
    kind = "local"
    stopped_power_state = "off"

    def close(self) -> None:
        pass


def _rec(name: str, phase: str, *, failures: int = 0, cause: str | None = None, cordoned: bool = False) -> GroupRecord:
    return GroupRecord(name, phase, 0.0, health_failures=failures, cause=cause, cordoned=cordoned)


HEALTH = f"{HEALTH_CAUSE} 3 probe(s) in a row"


@pytest.mark.parametrize("others, max_failed, serving, refused", [
    # g2 ready and healthy: g1 may be failed.
    ({"g2": _rec("g2", "ready"), "g3": _rec("g3", "off")}, 1, True, None),
    # g2 already failed for /health: the budget of 1 is spent.
    ({"g2": _rec("g2", "failed", cause=HEALTH), "g3": _rec("g3", "ready")}, 1, True, "g2 already failed"),
    # ... a budget of 2 allows a second one.
    ({"g2": _rec("g2", "failed", cause=HEALTH), "g3": _rec("g3", "ready")}, 2, True, None),
    # A group failed for another cause (its start) does not spend the health budget.
    ({"g2": _rec("g2", "failed", cause="start failed: exit 1"), "g3": _rec("g3", "ready")}, 1, True, None),
    # A cordoned one is out until an operator returns it: it no longer counts.
    ({"g2": _rec("g2", "failed", cause=HEALTH, cordoned=True), "g3": _rec("g3", "ready")}, 1, True, None),
    # Every other ready group has a failed probe too (a fleet-wide blip): g1 is the last serving.
    ({"g2": _rec("g2", "ready", failures=2), "g3": _rec("g3", "ready", failures=1)}, 1, True, "no other ready group"),
    # ... unless the gateway lists g1 unhealthy: then it serves nothing, and taking it down loses nothing.
    ({"g2": _rec("g2", "ready", failures=2), "g3": _rec("g3", "ready", failures=1)}, 1, False, None),
    # The only group: kept while it may serve.
    ({"g2": _rec("g2", "off"), "g3": _rec("g3", "off")}, 1, True, "no other ready group"),
])
def test_health_budget(tmp_path, others, max_failed, serving, refused):
    path = write_policy(tmp_path / "p.yaml", lifecycle={"health_max_failed_groups": max_failed})
    loaded = load_policy(path)
    ledger = Ledger(f"sqlite:///{tmp_path}/l.db")
    try:
        ex = Executor(loaded.policy, LiveLedger(ledger), None, _NoActuator(), None,  # type: ignore[arg-type]
                      run_id=ledger.start_run("live", loaded, at=time.time()), epoch=1)
        ex.records = {"g1": _rec("g1", "ready", failures=3), **others}
        why = ex._health_budget_refuses("g1", serving=serving)
        if refused is None:
            assert why is None
        else:
            assert why is not None and refused in why, why
    finally:
        ledger.close()
