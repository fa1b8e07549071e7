"""The ``command`` actuator with real scripts: templates, a pair with one half up, commands that
fail, hang and flood their output. Each is recorded in the journal with its exit code and output
tail, and none hangs the controller."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from autoscaler.actuators.base import GroupStatus, run_bounded
from autoscaler.actuators.command import CommandActuator, render
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.executor import Executor
from tests.support.live import decision, write_policy
from tests.support.procs import free_port

SCRIPT = """#!/bin/sh
# $1 = start|stop|status, $2 = node name. Behaviour per node from files in the script's folder.
dir=$(dirname "$0")
echo "$1 $2" >> "$dir/calls.log"
mode=$(cat "$dir/$1-$2" 2>/dev/null || echo ok)
case "$mode" in
  ok) [ "$1" = status ] && { [ -f "$dir/up-$2" ] && exit 0 || exit 3; }
      [ "$1" = start ] && touch "$dir/up-$2"; [ "$1" = stop ] && rm -f "$dir/up-$2"; exit 0 ;;
  fail) echo "cannot reach $2: connection refused" >&2; exit 1 ;;
  hang) sleep 600 ;;
  flood) yes "flood from $2" | head -c 50000000; exit 0 ;;
esac
"""


def make_actuator(tmp_path: Path, **actuator) -> tuple[CommandActuator, Path, object]:
    script = tmp_path / "node.sh"
    script.write_text(SCRIPT)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    cfg = {"kind": "command", "start": [str(script), "start", "{node.name}"],
           "stop": [str(script), "stop", "{node.name}"], "status": [str(script), "status", "{node.name}"],
           "timeout_s": 2, "output_limit_bytes": 4096, **actuator}
    path = write_policy(tmp_path / "policy.yaml", actuator=cfg)
    policy = load_policy(path).policy
    return CommandActuator(policy), tmp_path, policy


def calls(folder: Path) -> list[str]:
    p = folder / "calls.log"
    return p.read_text().split("\n")[:-1] if p.exists() else []


def test_templates_are_filled_per_node_without_a_shell(tmp_path):
    act, _, policy = make_actuator(tmp_path)
    group = policy.fleet.groups[0]
    argv = render(["ssh", "{node.address}", "systemctl start sglang-tp2@{group.name}", "{group.worker_url};rm"],
                  group, group.nodes[1])
    assert argv == ["ssh", "127.0.0.12", "systemctl start sglang-tp2@g1", f"{group.worker_url};rm"]


def test_start_both_nodes_then_status_running_then_stop(tmp_path):
    act, folder, policy = make_actuator(tmp_path)
    g = policy.fleet.groups[0]
    assert act.status(g)[0] is GroupStatus.STOPPED
    assert act.start(g).ok
    assert act.status(g)[0] is GroupStatus.RUNNING
    assert act.stop(g).ok
    assert act.status(g)[0] is GroupStatus.STOPPED
    assert sorted(c for c in calls(folder) if c.startswith("start")) == ["start demo-1", "start demo-2"]
    assert act.stopped_power_state == "idle"  # command without power_off leaves nodes powered


def test_one_half_up_fails_the_start_and_stops_the_half_that_came_up(tmp_path):
    act, folder, policy = make_actuator(tmp_path)
    (folder / "start-demo-2").write_text("fail")
    g = policy.fleet.groups[0]
    result = act.start(g)
    assert not result.ok
    assert result.exit_code == 1
    assert "demo-2: " in result.detail and "exit 1" in result.detail
    assert "stopped the half that came up" in result.detail
    assert "stop demo-1" in calls(folder)
    assert act.status(g)[0] is GroupStatus.STOPPED
    assert "connection refused" in (result.output_tail or "")


def test_a_partial_pair_reads_as_partial(tmp_path):
    act, folder, policy = make_actuator(tmp_path)
    (folder / "up-demo-1").touch()
    assert act.status(policy.fleet.groups[0])[0] is GroupStatus.PARTIAL


def test_a_hanging_command_is_killed_at_its_timeout(tmp_path):
    act, folder, policy = make_actuator(tmp_path)
    (folder / "start-demo-1").write_text("hang")
    t0 = time.monotonic()
    result = act.start(policy.fleet.groups[0])
    assert time.monotonic() - t0 < 8  # timeout_s 2 (+ the undo of the other half)
    assert not result.ok and "killed after 2 s (timeout)" in result.detail


def test_a_flood_of_output_is_bounded_and_does_not_block(tmp_path):
    out = run_bounded(["sh", "-c", "yes flood | head -c 50000004"], timeout_s=30, output_limit_bytes=4096)
    assert out.exit_code == 0
    assert 0 < len(out.output_tail.encode()) <= 4096 and out.output_tail.endswith("flood\n")


def test_a_missing_program_is_a_result_not_a_crash():
    out = run_bounded(["/nonexistent/ipmitool", "x"], timeout_s=1, output_limit_bytes=100)
    assert not out.ok and "No such file" in out.describe()


@pytest.mark.parametrize("mode", ["fail", "hang", "flood"])
def test_executor_records_failing_hanging_and_flooding_starts(tmp_path, mode):
    act, folder, policy = make_actuator(tmp_path)
    (folder / "start-demo-2").write_text(mode)
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    loaded = load_policy(tmp_path / "policy.yaml")
    run_id = ledger.start_run("live", loaded, at=time.time())
    gateway = GatewayClient(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)  # never reached for a failed start
    ex = Executor(policy, LiveLedger(ledger), gateway, act, WorkerProbe(), run_id=run_id, epoch=7)
    t0 = time.monotonic()
    ex.apply(decision(Action.SCALE_UP, "g1"))
    assert time.monotonic() - t0 < 10
    rec = ex.records["g1"]
    if mode == "flood":  # a flood is not a failure: the start succeeded and its output is bounded
        assert rec.phase == "starting"
        start = [a for a in LiveLedger(ledger).actions() if a["kind"] == "start"][0]
        assert start["outcome"] == "ok" and len(start["output_tail"]) <= 2000
        return
    assert rec.phase == "failed" and rec.retry_at is not None
    start = [a for a in LiveLedger(ledger).actions() if a["kind"] == "start"][0]
    assert start["outcome"] == "failed" and start["epoch"] == 7
    if mode == "fail":
        assert start["exit_code"] == 1 and "connection refused" in start["output_tail"]
    else:
        assert start["exit_code"] is None and "timeout" in start["detail"]
    # the start's mark (phase starting, nodes charged as active) is written before the command runs
    assert [e.event for e in ledger.events(run_id)] == ["started", "failed"]
    ledger.close()
    gateway.close()


def test_policy_requires_the_command_templates_and_rejects_unknown_fields(tmp_path):
    from autoscaler.errors import BadInput

    path = write_policy(tmp_path / "p.yaml", actuator={"kind": "command", "start": ["x"], "stop": ["y"]})
    with pytest.raises(BadInput, match=r"actuator.status: is required when actuator.kind is command"):
        load_policy(path)
    path = write_policy(tmp_path / "q.yaml", actuator={"kind": "command", "start": ["x", "{node.ip}"],
                                                       "stop": ["y"], "status": ["z"]})
    with pytest.raises(BadInput, match=r"\{node.ip\} is not a template field"):
        load_policy(path)


def test_epoch_and_instance_fill_the_templates_for_the_sites_own_fencing(tmp_path):
    from autoscaler.actuators.base import ActContext

    act, folder, policy = make_actuator(tmp_path)
    group, node = policy.fleet.groups[0], policy.fleet.groups[0].nodes[0]
    assert render(["check-epoch", "{epoch}", "{instance}", "{group.name}"], group, node,
                  ActContext(7, "ctl-a")) == ["check-epoch", "7", "ctl-a", "g1"]


def test_a_forced_stop_powers_off_even_when_the_in_band_stop_fails_or_hangs(tmp_path):
    script = tmp_path / "node.sh"
    for mode in ("fail", "hang"):
        act, folder, policy = make_actuator(tmp_path, power_off=[str(script), "power_off", "{node.name}"],
                                            power_status=[str(script), "power_status", "{node.name}"])
        g = policy.fleet.groups[0]
        for node in g.nodes:
            (folder / f"stop-{node.name}").write_text(mode)
        (folder / "calls.log").unlink(missing_ok=True)
        result = act.stop(g, force=False)
        assert not result.ok and not any(c.startswith("power_off") for c in calls(folder))  # in-band failed: stops there
        (folder / "calls.log").unlink()
        result = act.stop(g, force=True)
        assert not result.ok  # the stop's own failure is still reported ...
        assert sorted(c for c in calls(folder) if c.startswith("power_off")) == [f"power_off {n.name}" for n in g.nodes]


def test_an_aborted_command_is_killed_with_its_process_group_and_reported_interrupted(tmp_path):
    marker, gpid = tmp_path / "ran", tmp_path / "grandchild.pid"
    # The command starts a grandchild that would outlive it; the abort kills the whole group.
    argv = ["sh", "-c", f"sleep 30 & echo $! > {gpid}; sleep 30"]
    deadline = time.monotonic() + 0.5
    outcome = run_bounded(argv, timeout_s=20, output_limit_bytes=1024, abort=lambda: time.monotonic() > deadline)
    assert outcome.interrupted and not outcome.timed_out and outcome.exit_code is None
    assert "interrupted" in outcome.describe()
    pid = int(gpid.read_text())
    wait_gone = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]:
        assert time.monotonic() < wait_gone, "the grandchild survived the abort"
        time.sleep(0.05)
    # Aborted before it starts: nothing runs at all.
    outcome = run_bounded(["touch", str(marker)], timeout_s=5, output_limit_bytes=1024, abort=lambda: True)
    assert outcome.interrupted and not marker.exists()


def test_a_status_sweep_runs_every_nodes_status_at_once(tmp_path):
    log = tmp_path / "status.log"
    slow = tmp_path / "slow.sh"
    slow.write_text(f"#!/bin/sh\necho begin >> {log}\nsleep 1\necho end >> {log}\nexit 3\n")
    slow.chmod(0o755)
    act, _folder, policy = make_actuator(tmp_path, status=[str(slow), "{node.name}"])
    states = act.status_many(policy.fleet.groups)
    assert {name: s for name, (s, _) in states.items()} == {g.name: GroupStatus.STOPPED for g in policy.fleet.groups}
    lines = log.read_text().split()
    # all six began before any ended: one sweep costs one slow call (an ssh), not six in a row
    assert lines == ["begin"] * 6 + ["end"] * 6
