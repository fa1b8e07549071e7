"""Real processes for tests: free ports, subprocesses with logs, readiness polls, the gateway.

    from tests.support.procs import emulated_worker, gateway, wait_http

    with emulated_worker(tmp_path, decode_tokens_per_s=2000) as w, \\
            gateway(tmp_path, worker_urls=[w.url]) as gw:
        httpx.post(gw.url + "/v1/chat/completions", json=...)

Every process gets its own session (process group), its output goes to a log file under the
test's tmp_path, and it is killed (SIGKILL to the group) at the end of the ``with`` block if it
is still running. Readiness is polled with a deadline, never slept for.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from autoscaler.demo.ports import free_port as _free_port

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def smg_binary() -> str:
    """The gateway binary: next to this Python (the venv), else on PATH."""
    beside = Path(PYTHON).with_name("smg")
    return str(beside) if beside.exists() else "smg"


def bad(p: subprocess.CompletedProcess, *needles: str) -> str:
    """Bad input as docs/interfaces.md has it: exit 2, nothing on stdout, exactly one line on stderr
    holding every needle (so no traceback, no log or progress line)."""
    assert p.returncode == 2, (p.returncode, p.stdout[-300:], p.stderr[-900:])
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.endswith("\n"), p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)
    return p.stderr


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, below the kernel's ephemeral range and claimed for ten
    minutes across every test process (autoscaler/demo/ports.py). Callers must still cope with losing
    a race to something outside the tests: ``gateway`` retries on a new port."""
    return _free_port(host)


class Proc:
    """A child process in its own process group, its stdout and stderr in ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, env: dict | None = None, cwd=None) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=full_env, cwd=cwd or REPO, start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        """The exit code; raises subprocess.TimeoutExpired if still running after ``timeout``."""
        return self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group (the child and anything it started) and reap it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)
        else:  # the leader exited; its group may still hold children
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self._log.close()

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def wait_until(predicate: Callable[[], object], deadline_s: float, *, what: str = "condition",
               interval_s: float = 0.05, proc: Proc | None = None):
    """Poll ``predicate`` until it returns something truthy (returned) or ``deadline_s`` passes
    (AssertionError naming ``what``, with the tail of ``proc``'s log). Exceptions count as False."""
    end = time.monotonic() + deadline_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a poll that fails is just "not yet"
            last_exc = exc
        if proc is not None and not proc.alive():
            raise AssertionError(f"{what}: process exited with {proc.popen.returncode}\n{proc.log()[-3000:]}")
        if time.monotonic() >= end:
            tail = f"\n--- log ---\n{proc.log()[-3000:]}" if proc is not None else ""
            raise AssertionError(f"{what}: not within {deadline_s} s (last error: {last_exc!r}){tail}")
        time.sleep(interval_s)


def wait_http(url: str, deadline_s: float = 10.0, *, status: int = 200, proc: Proc | None = None) -> httpx.Response:
    """Poll GET ``url`` until it answers ``status``; returns that response."""

    def probe():
        r = httpx.get(url, timeout=1.0)
        return r if r.status_code == status else None

    return wait_until(probe, deadline_s, what=f"GET {url} -> {status}", proc=proc)


# ----- the worker emulator ----------------------------------------------------------------------
@dataclass
class Worker:
    proc: Proc
    port: int
    url: str

    def fault(self, **modes) -> dict:
        r = httpx.post(self.url + "/_emulator/fault", json=modes, timeout=5)
        r.raise_for_status()
        return r.json()

    def state(self) -> dict:
        return httpx.get(self.url + "/_emulator/state", timeout=5).json()


def start_worker(log_dir: Path, *, name: str = "worker", wait_ready: bool = True, **options) -> Worker:
    """Start ``autoscaler emulate worker`` on a free port; options are its flags with
    underscores (``decode_tokens_per_s=2000``, ``startup_s=1``). Waits for /health 200 unless
    ``wait_ready`` is false (or start-up is long), or until it listens at least."""
    for _attempt in range(3):
        port = free_port()
        argv = [PYTHON, "-m", "autoscaler.emulator", "worker", "--port", str(port)]
        for key, value in options.items():  # a value of "" is a flag without a value
            argv += [f"--{key.replace('_', '-')}"] + ([str(value)] if value != "" else [])
        proc = Proc(argv, Path(log_dir) / f"{name}-{port}.log")
        url = f"http://127.0.0.1:{port}"
        try:
            # /_emulator/state answers from the first moment the port listens, health or not.
            wait_http(url + "/_emulator/state", 15.0, proc=proc)
            if wait_ready:
                wait_http(url + "/health", 15.0 + float(options.get("startup_s", 0)), proc=proc)
            return Worker(proc, port, url)
        except AssertionError:
            log = proc.log()
            proc.kill()
            if "cannot listen" in log or "address already in use" in log.lower():
                continue  # lost the race for the port: try another one
            raise
    raise AssertionError("could not start a worker on a free port in 3 tries")


@contextlib.contextmanager
def emulated_worker(log_dir: Path, **options) -> Iterator[Worker]:
    w = start_worker(log_dir, **options)
    try:
        yield w
    finally:
        w.proc.kill()


# ----- the SGLang Model Gateway -----------------------------------------------------------------
@dataclass
class Gateway:
    proc: Proc
    port: int
    metrics_port: int
    url: str
    metrics_url: str

    def workers(self) -> list[dict]:
        return httpx.get(self.url + "/workers", timeout=5).json()["workers"]

    def add_worker(self, url: str) -> str:
        r = httpx.post(self.url + "/workers", json={"url": url}, timeout=5)
        assert r.status_code == 202, (r.status_code, r.text)
        return r.json()["worker_id"]

    def remove_worker(self, worker_id: str) -> None:
        r = httpx.delete(f"{self.url}/workers/{worker_id}", timeout=5)
        assert r.status_code == 202, (r.status_code, r.text)

    def wait_healthy(self, url: str, deadline_s: float = 15.0) -> dict:
        """Poll GET /workers until ``url`` is listed healthy; returns its entry."""

        def listed():
            return next((w for w in self.workers() if w["url"] == url and w.get("is_healthy")), None)

        return wait_until(listed, deadline_s, what=f"gateway lists {url} healthy", proc=self.proc)


def start_gateway(log_dir: Path, *, worker_urls: Sequence[str] = (), policy: str = "cache_aware",
                  extra_args: Sequence[str] = ()) -> Gateway:
    """``smg launch`` on free ports (router and Prometheus), ready when /readiness answers 200.

    /readiness is 200 only once a worker is healthy; with no worker URL it stays 503, so then
    readiness is /liveness answering 200."""
    for _attempt in range(3):
        port, mport = free_port(), free_port()
        argv = [smg_binary(), "launch", "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(mport),
                "--policy", policy, *extra_args]
        if worker_urls:
            argv += ["--worker-urls", *worker_urls]
        proc = Proc(argv, Path(log_dir) / f"smg-{port}.log")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + ("/readiness" if worker_urls else "/liveness"), 20.0, proc=proc)
            return Gateway(proc, port, mport, url, f"http://127.0.0.1:{mport}/metrics")
        except AssertionError:
            log = proc.log()
            proc.kill()
            if "in use" in log.lower():
                continue
            raise
    raise AssertionError("could not start smg on free ports in 3 tries")


@contextlib.contextmanager
def gateway(log_dir: Path, **kwargs) -> Iterator[Gateway]:
    gw = start_gateway(log_dir, **kwargs)
    try:
        yield gw
    finally:
        gw.proc.kill()


# ----- a streaming client -----------------------------------------------------------------------
@dataclass
class StreamResult:
    status: int
    ttft_s: float | None = None  # first event with content, from sending
    e2e_s: float | None = None
    content: str = ""
    events: list = None  # parsed JSON events, in order
    done: bool = False  # saw "data: [DONE]"
    raw: bytes = b""
    error: str | None = None  # the stream broke: the exception's name and text


async def stream_post(url: str, body: dict, *, timeout_s: float = 30.0, on_first=None) -> StreamResult:
    """POST ``body`` (with ``"stream": true``) and read the SSE answer to its end.

    ``on_first`` (an async callable) runs once the first content event arrived, while the
    stream is still open: a test uses it to act on a request that is known to be in flight."""
    import aiohttp

    out = StreamResult(status=0, events=[])
    t0 = time.monotonic()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.post(url, json=body) as resp:
                out.status = resp.status
                async for line in resp.content:
                    out.raw += line
                    text = line.strip()
                    if not text.startswith(b"data:"):
                        continue
                    data = text[5:].strip()
                    if data == b"[DONE]":
                        out.done = True
                        continue
                    try:
                        event = json.loads(data)
                    except ValueError:
                        continue
                    out.events.append(event)
                    piece = "".join((c.get("delta") or {}).get("content") or c.get("text") or ""
                                    for c in event.get("choices") or []) if isinstance(event, dict) else ""
                    if piece and out.ttft_s is None:
                        out.ttft_s = time.monotonic() - t0
                        if on_first is not None:
                            await on_first()
                    out.content += piece
    except Exception as exc:  # noqa: BLE001 - a broken stream is a result, not a test error
        out.error = f"{type(exc).__name__}: {exc}"
    out.e2e_s = time.monotonic() - t0
    return out


def chat_body(content: str, max_tokens: int, **extra) -> dict:
    return {"model": "MiniMaxAI/MiniMax-M2.5", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "stream": True, **extra}
