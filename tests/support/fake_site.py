"""A site's ``ssh`` and ``ipmitool``, for the real-process tests of the documented ``command``
templates (docs/live.md): installed on PATH as two executables named ``ssh`` and ``ipmitool``
(``install(bin_dir, site_dir)``), they keep each host's power in ``site_dir``.

- ``ipmitool -I lanplus -H NODE-bmc -U admin -E chassis power on|soft|off|status``: ``on`` returns at
  once (the host then boots for ``boot_s``); ``soft``/``off`` powers the host off at once (the worker
  the group runs on it dies with it); ``status`` prints ``Chassis Power is on|off``.
- ``ssh -- ADDRESS [sudo] systemctl start|stop|is-active [--quiet] sglang-tp2@GROUP``: exit 255
  (``No route to host``) while the host is off or still booting, as a real ssh does. ``start`` on the
  group's first node launches ``autoscaler emulate worker`` on the group's port, in a session of
  its own (as a systemd unit outlives ssh), its pid in ``worker-GROUP.pid``; ``is-active`` exits 0
  while that worker lives (on the first node; the second node answers as the first), else 3.

``site_dir/site.json``: ``{"boot_s", "hosts": {ADDRESS: NODE}, "groups": {GROUP: {"port", "first"}}}``,
read at every call (a test may change ``boot_s`` while the controller runs). Every call is appended
to ``site_dir/calls.log`` as ``tool args... -> rc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SITE_ENV = "FAKE_SITE_DIR"


def install(bin_dir: Path, site_dir: Path, *, boot_s: float, hosts: dict[str, str],
            groups: dict[str, dict]) -> None:
    """Write ``ssh`` and ``ipmitool`` into ``bin_dir`` (put it first on PATH and ``FAKE_SITE_DIR``
    = ``site_dir`` in the environment) and the site's config; every host starts powered off."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    site_dir.mkdir(parents=True, exist_ok=True)
    (site_dir / "site.json").write_text(json.dumps({"boot_s": boot_s, "hosts": hosts, "groups": groups}))
    root = Path(__file__).resolve().parents[2]
    for tool in ("ssh", "ipmitool"):
        path = bin_dir / tool
        path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                        f"from tests.support.fake_site import main\nsys.exit(main({tool!r}, sys.argv[1:]))\n")
        path.chmod(0o755)


def set_boot_s(site_dir: Path, boot_s: float) -> None:
    config = json.loads((site_dir / "site.json").read_text())
    config["boot_s"] = boot_s
    (site_dir / "site.json").write_text(json.dumps(config))


def power(site_dir: Path, node: str) -> str:
    """'on' or 'off' (a host never powered on is off)."""
    try:
        return json.loads((site_dir / f"power-{node}.json").read_text())["state"]
    except (OSError, ValueError):
        return "off"


def worker_pids(site_dir: Path) -> list[int]:
    out = []
    for f in Path(site_dir).glob("worker-*.pid"):
        with contextlib.suppress(OSError, ValueError):
            out.append(int(f.read_text()))
    return out


def alive(pid: int) -> bool:
    """The process runs (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_worker(site: Path, group: str) -> None:
    pid_file = site / f"worker-{group}.pid"
    with contextlib.suppress(OSError, ValueError, ProcessLookupError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def _worker_up(site: Path, group: str) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return alive(int((site / f"worker-{group}.pid").read_text()))
    return False


def _ipmitool(site: Path, config: dict, args: list[str]) -> int:
    node = args[args.index("-H") + 1].removesuffix("-bmc")
    order = args[-1]
    state_file = site / f"power-{node}.json"
    if order == "status":
        print(f"Chassis Power is {power(site, node)}")
        return 0
    if order == "on":
        if power(site, node) != "on":
            state_file.write_text(json.dumps({"state": "on", "at": time.time()}))
        print("Chassis Power Control: Up/On")
        return 0
    if order in ("soft", "off"):
        for group, g in config["groups"].items():  # the host goes down: so does what runs on it
            if config["hosts"].get(g["first"]) == node:
                _kill_worker(site, group)
        state_file.write_text(json.dumps({"state": "off", "at": time.time()}))
        print("Chassis Power Control: Soft" if order == "soft" else "Chassis Power Control: Down/Off")
        return 0
    print(f"ipmitool: unknown order {order}", file=sys.stderr)
    return 1


def _ssh(site: Path, config: dict, args: list[str]) -> int:
    if args and args[0] == "--":
        args = args[1:]
    address, command = args[0], [a for a in args[1:] if a not in ("sudo", "--quiet")]
    node = config["hosts"].get(address)
    try:
        booted_at = json.loads((site / f"power-{node}.json").read_text())
    except (OSError, ValueError):
        booted_at = {"state": "off"}
    if booted_at["state"] != "on" or time.time() < booted_at["at"] + float(config["boot_s"]):
        print(f"ssh: connect to host {address} port 22: No route to host", file=sys.stderr)
        return 255
    if command[:1] != ["systemctl"] or len(command) != 3 or not command[2].startswith("sglang-tp2@"):
        print(f"fake ssh: unsupported command {command}", file=sys.stderr)
        return 1
    verb, group = command[1], command[2].split("@", 1)[1]
    g = config["groups"][group]
    first = g["first"] == address
    if verb == "is-active":
        return 0 if _worker_up(site, group) else 3
    if verb == "start":
        if first and not _worker_up(site, group):
            log = open(site / f"worker-{group}.log", "ab")
            proc = subprocess.Popen([sys.executable, "-m", "autoscaler", "emulate", "worker", "--host", "127.0.0.1",
                                     "--port", str(g["port"]), "--startup-s", "1", "--decode-tokens-per-s", "200"],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=str(Path(__file__).resolve().parents[2]))
            (site / f"worker-{group}.pid").write_text(str(proc.pid))
        return 0
    if verb == "stop":
        if first:
            _kill_worker(site, group)
        return 0
    print(f"fake ssh: unsupported verb {verb}", file=sys.stderr)
    return 1


def main(tool: str, args: list[str]) -> int:
    site = Path(os.environ[SITE_ENV])
    config = json.loads((site / "site.json").read_text())
    rc = _ipmitool(site, config, args) if tool == "ipmitool" else _ssh(site, config, args)
    with open(site / "calls.log", "a") as f:
        f.write(f"{tool} {' '.join(args)} -> {rc}\n")
    return rc
