"""docs/recipe.md is a script-checked document: every ``sh recipe-*`` block runs here, in order,
with the emulator standing in for the GPUs and stand-ins for ssh, sudo and systemctl (the recipe's
last section says what they do). Only the ``recipe-site`` block is replaced (free ports, a temporary
folder, one-second ticks). The real smg gateway, the real Prometheus and the real ``autoscaler``
run unchanged; every process is killed by its PID at the end, also when the test fails."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procs import REPO, Proc, free_port, smg_binary

RECIPE = REPO / "docs" / "recipe.md"
BLOCK = re.compile(r"^```sh recipe-(site|step|service)(?: (\w+))?\n(.*?)^```$", re.M | re.S)
STEP_TIMEOUT_S = 180

SSH = r"""#!/bin/bash
# ssh stand-in: skip the options, take the host, run the remote command here.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-i|-p|-l|-F|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
[ -f "$RECIPE_STATE/nodes/$host" ] || { echo "ssh: connect to host $host: No route to host" >&2; exit 255; }
RECIPE_NODE="$host" exec "$@"
"""

SUDO = """#!/bin/bash
exec "$@"
"""

SYSTEMCTL = r"""#!/bin/bash
# systemctl stand-in for the unit sglang-tp2@GROUP on the node $RECIPE_NODE (its rank and the group's
# port are in $RECIPE_STATE). Rank 0 runs the emulator on the worker URL's port; rank 1 only marks
# itself active. is-active: exit 0 running, 3 stopped.
set -u
cmd="$1"; shift
[ "${1:-}" = "--quiet" ] && shift
unit="$1"; group="${unit#sglang-tp2@}"
rank="$(cat "$RECIPE_STATE/nodes/$RECIPE_NODE")"
port="$(cat "$RECIPE_STATE/ports/$group")"
pidfile="$RECIPE_STATE/run/$group.pid"; mark="$RECIPE_STATE/run/$group-rank$rank"
alive() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
case "$cmd" in
  start)
    if [ "$rank" = 0 ]; then
      alive && exit 0
      setsid "$RECIPE_PYTHON" -m autoscaler emulate worker --host 127.0.0.1 --port "$port" --startup-s 2 \
        --max-running 6 >>"$RECIPE_STATE/run/$group.log" 2>&1 </dev/null &
      echo $! >"$pidfile"
      echo $! >>"$RECIPE_STATE/pids"
    else
      touch "$mark"
    fi ;;
  stop)
    if [ "$rank" = 0 ]; then
      if alive; then
        pid="$(cat "$pidfile")"; kill -TERM "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
      rm -f "$pidfile"
    else
      rm -f "$mark"
    fi ;;
  is-active)
    if [ "$rank" = 0 ]; then alive && exit 0; else [ -f "$mark" ] && exit 0; fi
    exit 3 ;;
  *) echo "systemctl stand-in: $cmd is not stood in for" >&2; exit 1 ;;
esac
"""


def blocks() -> list[tuple[str, str | None, str]]:
    return [(kind, name, body) for kind, name, body in BLOCK.findall(RECIPE.read_text(encoding="utf-8"))]


def site_variables(body: str) -> list[str]:
    return re.findall(r"\b([A-Z][A-Z0-9_]*)=", "\n".join(line for line in body.splitlines()
                                                        if not line.lstrip().startswith("#")))


def test_the_recipe_has_one_site_block_and_says_what_every_later_step_reads():
    found = blocks()
    assert [k for k, _, _ in found].count("site") == 1 and found[0][0] == "site"
    names = set(site_variables(found[0][2]))
    assert names == set(TEST_SITE_NAMES), "the test's site block must set exactly the recipe's variables"
    kinds = {name for kind, name, _ in found if kind == "service"}
    assert kinds == {"gateway", "prometheus", "controller"}


TEST_SITE_NAMES = ("AUTOSCALER_ETC", "AUTOSCALER_VAR", "GATEWAY_HOST", "GATEWAY_PORT", "GATEWAY_METRICS_PORT",
                   "PROMETHEUS_PORT", "SCRAPE_INTERVAL", "CONTROLLER_LISTEN", "TICK_INTERVAL_S",
                   "G1_URL", "G2_URL", "G3_URL", "NODE1", "NODE2", "NODE3", "NODE4", "NODE5", "NODE6")


def _test_site(tmp: Path, worker_ports: list[int]) -> str:
    values = {
        "AUTOSCALER_ETC": tmp / "etc", "AUTOSCALER_VAR": tmp / "var",
        "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": free_port(), "GATEWAY_METRICS_PORT": free_port(),
        "PROMETHEUS_PORT": free_port(), "SCRAPE_INTERVAL": "1s", "CONTROLLER_LISTEN": f"127.0.0.1:{free_port()}",
        "TICK_INTERVAL_S": 1,
        **{f"G{i + 1}_URL": f"http://127.0.0.1:{port}" for i, port in enumerate(worker_ports)},
        **{f"NODE{i}": f"127.0.0.{10 + i}" for i in range(1, 7)},
    }
    assert tuple(values) == TEST_SITE_NAMES
    return "\n".join(f"export {k}={v}" for k, v in values.items()) + "\n"


@pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                    reason="needs Prometheus (Debian: apt-get install prometheus)")
def test_the_recipe_runs_end_to_end_next_to_an_emulated_fleet(tmp_path):
    worker_ports = [free_port() for _ in range(3)]
    site = _test_site(tmp_path, worker_ports)
    state = tmp_path / "state"
    for sub in ("nodes", "ports", "run"):
        (state / sub).mkdir(parents=True)
    for i, group in enumerate(("g1", "g2", "g3")):
        (state / "ports" / group).write_text(str(worker_ports[i]))
        (state / "nodes" / f"127.0.0.{11 + 2 * i}").write_text("0")
        (state / "nodes" / f"127.0.0.{12 + 2 * i}").write_text("1")
    (state / "pids").touch()
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, text in (("ssh", SSH), ("sudo", SUDO), ("systemctl", SYSTEMCTL)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    venv_bin = Path(sys.executable).parent
    assert Path(smg_binary()).parent == venv_bin or shutil.which("smg")
    env = {"PATH": f"{shims}:{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "RECIPE_STATE": str(state), "RECIPE_PYTHON": sys.executable}
    # Nothing from the outer environment: Proc merges os.environ, so blank any AUTOSCALER_* there.
    env.update({k: "" for k in os.environ if k.startswith("AUTOSCALER_")})
    services: list[Proc] = []
    try:
        for index, (kind, name, body) in enumerate(blocks()):
            if kind == "site":
                continue
            script = site + body
            if kind == "service":
                services.append(Proc(["bash", "-euo", "pipefail", "-c", script], tmp_path / f"{name}.log",
                                     env=env, cwd=tmp_path))
                time.sleep(0.2)
                assert services[-1].alive(), f"recipe service {name} exited at once:\n{services[-1].log()[-3000:]}"
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
            logs = "\n".join(f"--- {p.log_path.name}\n{p.log()[-2500:]}" for p in services)
            assert done.returncode == 0, (f"recipe step {index} failed ({done.returncode}):\n{body}\n--- stdout\n"
                                          f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}\n{logs}")
            _check_after(body, state, tmp_path)
        # Acting: the floor's group runs on the emulator, started through ssh and systemctl, and its
        # worker got none of the controller's secrets.
        pids = [int(p) for p in (state / "pids").read_text().split()]
        assert len(pids) == 1
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert "RECIPE_STATE" in names  # the environment did reach it
        assert not {n for n in names if n.startswith(("AUTOSCALER_GATEWAY_API_KEY", "AUTOSCALER_DATABASE_URL",
                                                      "AUTOSCALER_STATUS_TOKEN"))}
    finally:
        for proc in reversed(services):
            proc.terminate()
        for proc in reversed(services):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            proc.kill()
        for pid in (int(p) for p in (state / "pids").read_text().split()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _check_after(body: str, state: Path, tmp: Path) -> None:
    """What must hold after certain steps, beyond their own exit code."""
    if '"paused": true' in body:
        # paused: the controller decided (the last decision is there) and acted on nothing
        assert (state / "pids").read_text() == "", "a worker was started while paused"
        assert not list((state / "run").glob("*-rank1"))
    if "autoscaler resume" in body:
        assert (state / "pids").read_text().strip(), "no worker was started after resume"
