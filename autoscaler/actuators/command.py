"""The ``command`` actuator: argv templates run once per node, without a shell.

Templates may use ``{node.name}``, ``{node.address}``, ``{group.name}``, ``{group.worker_url}``::

    actuator:
      kind: command
      start:  [ssh, "{node.address}", sudo, systemctl, start, "sglang-tp2@{group.name}"]
      stop:   [ssh, "{node.address}", sudo, systemctl, stop, "sglang-tp2@{group.name}"]
      status: [ssh, "{node.address}", systemctl, is-active, --quiet, "sglang-tp2@{group.name}"]
      power_on:  [ipmitool, -H, "{node.name}-bmc", chassis, power, on]     # optional
      power_off: [ipmitool, -H, "{node.name}-bmc", chassis, power, soft]   # optional
      timeout_s: 60

The nodes of a group run their commands in parallel. Starting a group starts both nodes; when one
half comes up and the other does not, the start fails and the half that came up is stopped again.
Status: exit 0 = running, 3 = stopped (as ``systemctl is-active``), anything else = unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from autoscaler.actuators.base import ActResult, CommandOutcome, GroupStatus, run_bounded
from autoscaler.policy.model import Group, Node, Policy, PowerState


def render(argv: Sequence[str], group: Group, node: Node) -> list[str]:
    fields = {"{node.name}": node.name, "{node.address}": node.address, "{group.name}": group.name,
              "{group.worker_url}": group.worker_url}
    out = []
    for arg in argv:
        for key, value in fields.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


class CommandActuator:
    kind = "command"

    def __init__(self, policy: Policy) -> None:
        self.config = policy.actuator
        self._pool = ThreadPoolExecutor(max_workers=max(2, policy.fleet.group_size_nodes), thread_name_prefix="actuator")

    @property
    def stopped_power_state(self) -> str:
        return self.config.power_state_when_stopped.value

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, template: Sequence[str] | None, group: Group, node: Node) -> CommandOutcome | None:
        if not template:
            return None
        return run_bounded(render(template, group, node), timeout_s=self.config.timeout_s,
                           output_limit_bytes=self.config.output_limit_bytes)

    def _on_each_node(self, group: Group, *templates: Sequence[str] | None) -> list[tuple[Node, CommandOutcome | None]]:
        def steps(node: Node) -> CommandOutcome | None:
            last = None
            for template in templates:
                outcome = self._run(template, group, node)
                if outcome is not None:
                    last = outcome
                    if not outcome.ok:
                        return outcome
            return last

        return list(zip(group.nodes, self._pool.map(steps, group.nodes)))

    def start(self, group: Group) -> ActResult:
        results = self._on_each_node(group, self.config.power_on, self.config.start)
        failed = [(n, o) for n, o in results if o is not None and not o.ok]
        if not failed:
            return ActResult(True, f"started {', '.join(n.name for n, _ in results)}", 0,
                             _tail(results[-1][1]))
        detail = "; ".join(f"{n.name}: {o.describe()}" for n, o in failed)
        up = [n for n, o in results if o is None or o.ok]
        if up:  # one half came up, the other did not: stop the half that did
            undo = self._on_each_node_subset(group, up, self.config.stop, self.config.power_off)
            detail += "; stopped the half that came up (" + ", ".join(
                f"{n.name}: {o.describe() if o else 'nothing to run'}" for n, o in undo) + ")"
        node, outcome = failed[0]
        return ActResult(False, f"start failed: {detail}", outcome.exit_code, _tail(outcome))

    def _on_each_node_subset(self, group: Group, nodes: list[Node], *templates) -> list[tuple[Node, CommandOutcome | None]]:
        sub = group.model_copy(update={"nodes": tuple(nodes)})
        return self._on_each_node(sub, *templates)

    def stop(self, group: Group, *, force: bool = False) -> ActResult:
        # force (a drain that timed out) changes nothing here: the stop command is the site's own.
        results = self._on_each_node(group, self.config.stop, self.config.power_off)
        failed = [(n, o) for n, o in results if o is not None and not o.ok]
        if not failed:
            return ActResult(True, f"stopped {', '.join(n.name for n, _ in results)}", 0, _tail(results[-1][1]))
        node, outcome = failed[0]
        return ActResult(False, "stop failed: " + "; ".join(f"{n.name}: {o.describe()}" for n, o in failed),
                         outcome.exit_code, _tail(outcome))

    def status(self, group: Group) -> tuple[GroupStatus, str]:
        results = self._on_each_node(group, self.config.status)
        states = []
        for node, outcome in results:
            if outcome is None:
                states.append((node, GroupStatus.UNKNOWN, "no status command"))
            elif outcome.exit_code == 0:
                states.append((node, GroupStatus.RUNNING, "running"))
            elif outcome.exit_code == 3:
                states.append((node, GroupStatus.STOPPED, "stopped"))
            else:
                states.append((node, GroupStatus.UNKNOWN, outcome.describe()))
        detail = ", ".join(f"{n.name} {d}" for n, _, d in states)
        kinds = {s for _, s, _ in states}
        if kinds == {GroupStatus.RUNNING}:
            return GroupStatus.RUNNING, detail
        if kinds == {GroupStatus.STOPPED}:
            return GroupStatus.STOPPED, detail
        if GroupStatus.UNKNOWN in kinds:
            return GroupStatus.UNKNOWN, detail
        return GroupStatus.PARTIAL, detail


def _tail(outcome: CommandOutcome | None, limit: int = 2000) -> str | None:
    if outcome is None:
        return None
    return outcome.output_tail[-limit:]


__all__ = ["CommandActuator", "PowerState", "render"]
