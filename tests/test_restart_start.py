"""SIGKILL between a group's ``starting`` mark and its start command, then a restart (issue 34, item
5), with ``autoscaler run`` processes, the ``command`` actuator's logging site script
(``tests.support.fleet_script``: a real emulated worker per group) and the real gateway.

Before: the restarted leader left g1 ``starting`` with no start command issued (its status read
stopped) until ``lifecycle.health_deadline_s`` (600 s here), deciding ``hold / action_in_flight``.
Now, once the dead leader's intent has passed its act's timeout (it may have launched a command,
which ``timeout -k`` ends by then), the start is issued again and g1 gets ready.
"""

from __future__ import annotations

import signal
import time

from tests.support.fleet_script import calls
from tests.support.procs import gateway, wait_until
from tests.test_fenced_acts import command_policy, fleet_folder, kill_workers, run_proc, status


def test_a_start_killed_before_its_command_is_issued_again_after_a_restart(tmp_path):
    folder = fleet_folder(tmp_path)
    # timeout_s 2: the dead leader's start may run until 4 x (2 + 2 s grace) + 5 = 21 s after its intent.
    policy = command_policy(tmp_path / "p.yaml", folder, timeout_s=2, lifecycle={"health_deadline_s": 600})
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    try:
        with gateway(tmp_path) as gw:
            first, _ = run_proc(tmp_path, policy, db, gw.url, name="first",
                                env={"AUTOSCALER_FAULTS": "kill:after_mark:starting"})
            with first:
                assert first.wait(90) == -signal.SIGKILL, first.log()[-2000:]
            assert not [c for c in calls(folder) if c["call"] == "start"]  # killed before its command
            again, url = run_proc(tmp_path, policy, db, gw.url, name="again")
            with again:
                t0 = time.monotonic()
                wait_until(lambda: status(url)["groups"]["g1"]["phase"] == "ready", 90,
                           what="g1 started again and ready (not at the 600 s health deadline)", proc=again,
                           interval_s=0.5)
                took = time.monotonic() - t0
            starts = [c for c in calls(folder) if c["call"] == "start" and c["group"] == "g1"]
            assert starts and all(c["instance"] == "again" for c in starts)
            assert took < 90, took
    finally:
        kill_workers(folder)
