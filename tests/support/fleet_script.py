"""A site's start/stop/status script for the ``command`` actuator, standing in for ssh + systemd in
the real-process tests: every call is logged, and the group's server is an emulated SGLang worker.

    python -m tests.support.fleet_script start|stop|status --dir D --group G --node N --url URL \\
        --epoch E --instance I

- ``start`` on a group's first node (an odd number at the end of its name: ``demo-1``) launches
  ``autoscaler emulate worker`` on the URL's port in a session of its own (it outlives this script,
  as a systemd unit outlives ssh) and records its pid in ``D/G.pid``; on the second node it creates
  ``D/G.node2``. Then it sleeps ``start_sleep_s`` (a slow start: loading weights).
- ``stop``: SIGTERM to the worker (SIGKILL after 3 s), or removes the marker.
- ``status``: after ``status_sleep_s`` (a slow ssh), exit 0 when the worker's process is alive (or
  the marker exists), else 3 (as ``systemctl is-active``: active from the start, not from ready).

``D/config.json`` holds ``start_sleep_s``, ``status_sleep_s``, ``worker_startup_s`` and
``bg_holds_pipe_s`` (a start then leaves a ``sleep`` holding its stdout that long); it is read
at every call, so a test can change them while the controller runs. Every call appends JSON lines to
``D/calls.jsonl``: ``{"call", "id", "begin"}`` at the start, ``{"id", "hb"}`` every 0.2 s while it
sleeps, ``{"id", "end", "rc"}`` at the end. A call killed by the controller (its process group)
has no end line: its last heartbeat says when it died. ``calls(D)`` reads them back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit


def _log(folder: Path, entry: dict) -> None:
    with open(folder / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def _config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _port_open(port: int) -> bool:
    # As autoscaler.actuators.local.port_open, without importing the package: this script runs at every
    # status sweep of every controller in a test, and the import alone cost ~0.3 s of CPU per call.
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state not in ("Z", "X")


def _sleep(folder: Path, call_id: str, seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(min(0.2, max(0.0, end - time.time())))
        _log(folder, {"id": call_id, "hb": time.time()})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["start", "stop", "status"])
    for flag in ("--dir", "--group", "--node", "--url", "--epoch", "--instance"):
        p.add_argument(flag, required=True)
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    folder = Path(args.dir)
    config = _config(folder)
    call_id = uuid.uuid4().hex[:12]
    first = args.node[-1:].isdigit() and int(args.node[-1]) % 2 == 1
    _log(folder, {"call": args.action, "id": call_id, "group": args.group, "node": args.node, "epoch": int(args.epoch),
                  "instance": args.instance, "tag": args.tag, "pid": os.getpid(), "begin": time.time()})
    port = urlsplit(args.url).port or 0
    pid_file, marker = folder / f"{args.group}.pid", folder / f"{args.group}.node2"
    rc = 0
    if args.action == "start":
        if first and not _alive(pid_file) and not _port_open(port):
            log = open(folder / f"worker-{args.group}.log", "ab")
            proc = subprocess.Popen([sys.executable, "-m", "autoscaler", "emulate", "worker", "--host", "127.0.0.1",
                                     "--port", str(port), "--startup-s", str(config.get("worker_startup_s", 1)),
                                     "--decode-tokens-per-s", "200"],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            pid_file.write_text(str(proc.pid))
            _log(folder, {"id": call_id, "worker_pid": proc.pid, "group": args.group, "launched": time.time()})
            if config.get("bg_holds_pipe_s"):
                # What a careless start script does (`nohup helper &`): a background child that
                # inherits the script's stdout, so the pipe stays open after the script exits.
                bg = subprocess.Popen(["sleep", str(config["bg_holds_pipe_s"])], stdin=subprocess.DEVNULL)
                _log(folder, {"id": call_id, "bg_pid": bg.pid, "group": args.group})
        elif not first:
            marker.write_text("up")
        _sleep(folder, call_id, float(config.get("start_sleep_s", 0)))
    elif args.action == "stop":
        if first:
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                    end = time.time() + 3
                    while _port_open(port) and time.time() < end:
                        time.sleep(0.1)
                    if _port_open(port):
                        os.kill(pid, signal.SIGKILL)
                end = time.time() + 5
                while _port_open(port) and time.time() < end:
                    time.sleep(0.05)
                _log(folder, {"id": call_id, "group": args.group, "worker_stopped": time.time()})
            with contextlib.suppress(FileNotFoundError):
                pid_file.unlink()
        else:
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
    else:
        _sleep(folder, call_id, float(config.get("status_sleep_s", 0)))
        up = _alive(pid_file) if first else marker.exists()
        rc = 0 if up else 3
    _log(folder, {"id": call_id, "end": time.time(), "rc": rc})
    return rc


def calls(folder: Path) -> list[dict]:
    """Every call, merged: ``{"call", "group", "epoch", "instance", "begin", "end" (None: killed),
    "last" (its end, else its last heartbeat), "tag", ...}`` in order of their start."""
    by_id: dict[str, dict] = {}
    path = Path(folder) / "calls.jsonl"
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        call = by_id.setdefault(entry["id"], {"end": None})
        if "hb" in entry:
            call["last"] = entry["hb"]
        else:
            call.update({k: v for k, v in entry.items() if k != "id"})
    out = []
    for call in by_id.values():
        if "call" not in call:
            continue
        call["last"] = call["end"] if call.get("end") is not None else call.get("last", call["begin"])
        out.append(call)
    return sorted(out, key=lambda c: c["begin"])


def worker_pids(folder: Path) -> list[int]:
    """The pids of every worker the script launched (for the test's cleanup): those it logged, and
    every process whose output goes to a worker log in ``folder``. A start cut between the launch
    and its log line (a controller stopped mid-act kills the script, not the worker it started, as
    a systemd unit outlives ssh) leaves a worker only the second finds."""
    pids = {c.get("worker_pid") or c["bg_pid"] for c in _raw(folder) if "worker_pid" in c or "bg_pid" in c}
    logs = str(Path(folder).resolve()) + "/worker-"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "fd" / "1").startswith(logs):
                    pids.add(int(entry.name))
            except OSError:
                continue
    return sorted(pids)


def _raw(folder: Path) -> list[dict]:
    path = Path(folder) / "calls.jsonl"
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


if __name__ == "__main__":
    sys.exit(main())
