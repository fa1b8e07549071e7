"""The ``command`` actuator: argv templates run once per node, without a shell.

Templates may use ``{node.name}``, ``{node.address}``, ``{group.name}``, ``{group.worker_url}``,
``{epoch}`` (the acting leader's epoch: a fencing token a site's script may check, refusing an
epoch older than the newest it has seen) and ``{instance}`` (the acting controller)::

    actuator:
      kind: command
      start:  [ssh, --, "{node.address}", sudo, systemctl, start, "sglang-tp2@{group.name}"]
      stop:   [ssh, --, "{node.address}", sudo, systemctl, stop, "sglang-tp2@{group.name}"]
      status: [ssh, --, "{node.address}", systemctl, is-active, --quiet, "sglang-tp2@{group.name}"]
      power_on:  [ipmitool, -H, "{node.name}-bmc", chassis, power, on]     # optional
      power_off: [ipmitool, -H, "{node.name}-bmc", chassis, power, soft]   # optional
      power_status: [ipmitool, -H, "{node.name}-bmc", chassis, power, status]  # required with power_*
      timeout_s: 60

ssh joins its remote arguments into one string that the remote shell parses again: the policy
refuses node addresses and worker URLs with shell characters, and ``--`` keeps an address from
being read as an ssh option.

The nodes of a group run their commands in parallel. Starting a group starts both nodes; when one
half comes up and the other does not, the start fails and the half that came up is stopped again.
A forced stop runs ``power_off`` on every node even when the in-band ``stop`` failed or hung (a
hung OS still gets its BMC power-off). Status: exit 0 = running, 3 = stopped (as
``systemctl is-active``), anything else = unknown. A start or stop runs only while its
``ActContext`` is not aborted: losing leadership kills the command's process group.

**Power.** With ``power_on``/``power_off`` the power controller is the authority on "off": a node
whose ``power_status`` says off is stopped, whatever its in-band status (an ssh to a powered-off
host exits 255, which alone reads as unknown). Booting is a step of its own: the executor runs
``power_on`` (``power_on()``), waits until every node's in-band status answers (``booted()``, with
``lifecycle.boot_deadline_s``), and only then the start command (``start(..., boot=False)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from autoscaler.actuators.base import NO_CONTEXT, ActContext, ActResult, CommandOutcome, GroupStatus, run_bounded
from autoscaler.policy.model import Group, Node, Policy, PowerState


def render(argv: Sequence[str], group: Group, node: Node, ctx: ActContext = NO_CONTEXT) -> list[str]:
    fields = {"{node.name}": node.name, "{node.address}": node.address, "{group.name}": group.name,
              "{group.worker_url}": group.worker_url, "{epoch}": str(ctx.epoch), "{instance}": ctx.instance}
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
        # Boots in a step of its own (the executor's): power_on, then the start once booted.
        self.power_control = bool(self.config.power_on)
        nodes = sum(len(g.nodes) for g in policy.fleet.groups)
        # Every node of every group at once: a status sweep of the fleet takes one slow ssh, not six.
        self._pool = ThreadPoolExecutor(max_workers=max(2, nodes), thread_name_prefix="actuator")

    @property
    def stopped_power_state(self) -> str:
        return self.config.power_state_when_stopped.value

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, template: Sequence[str] | None, group: Group, node: Node, ctx: ActContext) -> CommandOutcome | None:
        if not template:
            return None
        return run_bounded(render(template, group, node, ctx), timeout_s=self.config.timeout_s,
                           output_limit_bytes=self.config.output_limit_bytes,
                           abort=ctx.abort)

    def _on_each_node(self, group: Group, *templates: Sequence[str] | None, ctx: ActContext = NO_CONTEXT,
                      keep_going: bool = False) -> list[tuple[Node, CommandOutcome | None]]:
        """Run the templates in order on every node (nodes in parallel). A failure ends a node's
        steps, unless ``keep_going`` (a forced stop: power off whatever the in-band stop did);
        the node's first failure is what it reports."""
        def steps(node: Node) -> CommandOutcome | None:
            last = first_failure = None
            for template in templates:  # run_bounded refuses to start a command once ctx is aborted
                outcome = self._run(template, group, node, ctx)
                if outcome is None:
                    continue
                last = outcome
                if not outcome.ok:
                    first_failure = first_failure or outcome
                    if not keep_going:
                        break
            return first_failure or last

        return list(zip(group.nodes, self._pool.map(steps, group.nodes)))

    def power_on(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> ActResult:
        """``power_on`` on every node: returns once the power controller took the order (the OS
        boots afterwards: ``booted()`` says when)."""
        return _act_result("powered on", "power on", self._on_each_node(group, self.config.power_on, ctx=ctx))

    def booted(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> tuple[bool, str]:
        """Has every node booted: powered on (when ``power_status`` can say) and its in-band status
        answering (running or stopped, not unknown)? And a one-line detail per node."""
        outcomes = list(zip(group.nodes, self._pool.map(lambda n: self._node_status(group, n, ctx), group.nodes)))
        up = all(state in (GroupStatus.RUNNING, GroupStatus.STOPPED) and detail != POWERED_OFF
                 for _, (state, detail) in outcomes)
        return up, ", ".join(f"{n.name} {detail}" for n, (_, detail) in outcomes)

    def start(self, group: Group, *, ctx: ActContext = NO_CONTEXT, boot: bool = True) -> ActResult:
        """Start every node: ``power_on`` then ``start`` (``boot=False``: the start alone, the nodes
        having booted in the executor's own step)."""
        results = self._on_each_node(group, self.config.power_on if boot else None, self.config.start, ctx=ctx)
        failed = [(n, o) for n, o in results if o is not None and not o.ok]
        if not failed:
            return ActResult(True, f"started {', '.join(n.name for n, _ in results)}", 0,
                             _tail(results[-1][1]))
        detail = "; ".join(f"{n.name}: {o.describe()}" for n, o in failed)
        interrupted = any(o.interrupted for _, o in failed)
        up = [n for n, o in results if o is None or o.ok]
        if up and not interrupted:  # one half came up, the other did not: stop the half that did
            undo = self._on_each_node_subset(group, up, self.config.stop, self.config.power_off, ctx=ctx)
            detail += "; stopped the half that came up (" + ", ".join(
                f"{n.name}: {o.describe() if o else 'nothing to run'}" for n, o in undo) + ")"
        node, outcome = failed[0]
        return ActResult(False, f"start failed: {detail}", outcome.exit_code, _tail(outcome), interrupted=interrupted)

    def _on_each_node_subset(self, group: Group, nodes: list[Node], *templates,
                             ctx: ActContext = NO_CONTEXT) -> list[tuple[Node, CommandOutcome | None]]:
        sub = group.model_copy(update={"nodes": tuple(nodes)})
        return self._on_each_node(sub, *templates, ctx=ctx)

    def stop(self, group: Group, *, force: bool = False, ctx: ActContext = NO_CONTEXT) -> ActResult:
        # force: the power-off runs whatever the in-band stop did (failed, hung and killed at its timeout).
        return _act_result("stopped", "stop", self._on_each_node(group, self.config.stop, self.config.power_off,
                                                                 ctx=ctx, keep_going=force))

    def status(self, group: Group, *, ctx: ActContext = NO_CONTEXT) -> tuple[GroupStatus, str]:
        return self.status_many([group], ctx=ctx)[group.name]

    def status_many(self, groups: Iterable[Group], *, ctx: ActContext = NO_CONTEXT) -> dict[str, tuple[GroupStatus, str]]:
        """The status of several groups at once (every node in parallel): one sweep of the fleet
        takes as long as its slowest status command."""
        groups = list(groups)
        futures = {g.name: [(n, self._pool.submit(self._node_status, g, n, ctx)) for n in g.nodes] for g in groups}
        return {g.name: self._status_of([(n, f.result()) for n, f in futures[g.name]]) for g in groups}

    def _node_status(self, group: Group, node: Node, ctx: ActContext) -> tuple[GroupStatus, str]:
        """One node: the power controller first (its "off" decides), then the in-band status."""
        power = None
        if self.config.power_status:
            power = _power_reading(self._run(self.config.power_status, group, node, ctx))
            if power == "off":
                return GroupStatus.STOPPED, POWERED_OFF
        outcome = self._run(self.config.status, group, node, ctx)
        if outcome is None:
            return GroupStatus.UNKNOWN, "no status command"
        if outcome.exit_code == 0:
            return GroupStatus.RUNNING, "running"
        if outcome.exit_code == 3:
            return GroupStatus.STOPPED, "stopped"
        prefix = "powered on, not answering (booting?): " if power == "on" else ""
        return GroupStatus.UNKNOWN, prefix + outcome.describe()

    @staticmethod
    def _status_of(results: list[tuple[Node, tuple[GroupStatus, str]]]) -> tuple[GroupStatus, str]:
        states = [(node, state, detail) for node, (state, detail) in results]
        detail = ", ".join(f"{n.name} {d}" for n, _, d in states)
        kinds = {s for _, s, _ in states}
        if kinds == {GroupStatus.RUNNING}:
            return GroupStatus.RUNNING, detail
        if kinds == {GroupStatus.STOPPED}:
            return GroupStatus.STOPPED, detail
        if GroupStatus.UNKNOWN in kinds:
            return GroupStatus.UNKNOWN, detail
        return GroupStatus.PARTIAL, detail


def _act_result(done: str, act: str, results: list[tuple[Node, CommandOutcome | None]]) -> ActResult:
    """Every node's outcome as one result: ``"stopped g1-a, g1-b"`` or ``"stop failed: g1-a: ..."``."""
    failed = [(n, o) for n, o in results if o is not None and not o.ok]
    if not failed:
        return ActResult(True, f"{done} {', '.join(n.name for n, _ in results)}", 0, _tail(results[-1][1]))
    _node, outcome = failed[0]
    return ActResult(False, f"{act} failed: " + "; ".join(f"{n.name}: {o.describe()}" for n, o in failed),
                     outcome.exit_code, _tail(outcome), interrupted=any(o.interrupted for _, o in failed))


POWERED_OFF = "powered off"  # a node's status detail when the power controller says off


def _power_reading(outcome: CommandOutcome | None) -> str | None:
    """'on', 'off' or None (unknown) from ``power_status``: exit 0 and the output's last word."""
    if outcome is None or not outcome.ok:
        return None
    words = outcome.output_tail.strip().lower().split()
    last = words[-1].strip(".") if words else ""
    return last if last in ("on", "off") else None


def _tail(outcome: CommandOutcome | None, limit: int = 2000) -> str | None:
    if outcome is None:
        return None
    return outcome.output_tail[-limit:]


__all__ = ["CommandActuator", "PowerState", "render"]
