"""A real Prometheus for tests: started on a free 127.0.0.1 port with a temporary data directory.

    with running_prometheus(["127.0.0.1:8001"], tmp_path) as prom:
        prom.query("sglang:num_running_reqs")

- The ``prometheus`` binary must be on PATH (CI installs Debian's 2.42 via scripts/bootstrap.sh);
  a missing binary is an error, not a skip.
- Scrape interval 1 s (scrape timeout 1 s, which must not exceed the interval),
  ``--storage.tsdb.retention.time=100y`` so pre-loaded history from any year is kept.
- ``start`` waits until Prometheus is ready and, when there are targets, until every target has
  been scraped once (an ``up`` sample each): a new target is first scraped only after ~5 s, since
  Prometheus's scrape manager applies target updates at most every 5 s.
- ``load_history`` pre-loads recorded samples with ``promtool tsdb create-blocks-from openmetrics``
  into the data directory before start; ``openmetrics_text`` writes that input correctly
  (timestamps in seconds, each series in ascending time, ``# EOF`` as the very last line).

The ``prometheus_factory`` fixture starts any number of them and stops them all at teardown.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.procs import free_port

STARTUP_TIMEOUT_S = 30.0


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on PATH; scripts/bootstrap.sh --test installs Debian's prometheus")
    return path


def write_config(path: Path, targets: Sequence[str], scrape_interval_s: float = 1.0) -> None:
    interval = f"{int(scrape_interval_s * 1000)}ms"
    lines = [
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {interval}",
        f"  evaluation_interval: {interval}",
        "scrape_configs:",
        "  - job_name: sglang",
        "    static_configs:",
        f"      - targets: [{', '.join(repr(t) for t in targets)}]",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ history
@dataclass(frozen=True)
class Series:
    """One recorded series: a metric name, labels and (epoch seconds, value) samples."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[tuple[float, float]]
    kind: str = "gauge"  # the OpenMetrics TYPE: gauge, counter (name must then end in _total), unknown


def _om_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def openmetrics_text(series: Sequence[Series]) -> str:
    """The OpenMetrics text promtool reads: one metric family's series together, samples sorted
    by time within each series, timestamps in seconds (not ms), and ``# EOF`` as the last line."""
    out: list[str] = []
    families: dict[str, list[Series]] = {}
    for s in series:
        families.setdefault(s.name, []).append(s)
    for name, members in families.items():
        family = name.removesuffix("_total") if members[0].kind == "counter" else name
        out.append(f"# TYPE {family} {members[0].kind}")
        for s in members:
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
            label_text = f"{{{labels}}}" if labels else ""
            for t, v in sorted(s.samples):
                out.append(f"{name}{label_text} {_om_value(v)} {t:.3f}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def load_history(data_dir: Path, series: Sequence[Series] | str) -> str:
    """Turn recorded samples into TSDB blocks in ``data_dir`` (before Prometheus starts on it).
    Returns promtool's output. Raises RuntimeError with promtool's message when it refuses."""
    data_dir.mkdir(parents=True, exist_ok=True)
    text = series if isinstance(series, str) else openmetrics_text(series)
    source = data_dir.parent / f"{data_dir.name}-history.om"
    source.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool create-blocks-from failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# ----------------------------------------------------------------------------------- process
@dataclass
class Prometheus:
    """A running Prometheus process. ``url`` is its base URL (http://127.0.0.1:PORT)."""

    port: int
    data_dir: Path
    config_path: Path
    log_path: Path
    targets: tuple[str, ...]
    process: subprocess.Popen | None = None
    _client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=5.0))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait_for_targets: bool = True, timeout_s: float = STARTUP_TIMEOUT_S) -> Prometheus:
        """Start and wait (see the module doc). The port was free when picked; if another process
        took it meanwhile, Prometheus exits at once and we try another port (3 tries)."""
        for attempt in range(3):
            try:
                return self._start_once(wait_for_targets, timeout_s)
            except RuntimeError:
                self.stop()
                if attempt == 2 or "address already in use" not in self.log_tail():
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, wait_for_targets: bool, timeout_s: float) -> Prometheus:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                _binary("prometheus"),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_dir}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        self._wait(lambda: self._ready(), deadline, "ready")
        if wait_for_targets and self.targets:
            want = set(self.targets)
            self._wait(lambda: want <= {s["metric"].get("instance") for s in self.query("up")}, deadline, "first scrape")
        return self

    def _ready(self) -> bool:
        try:
            return self._client.get(f"{self.url}/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def _wait(self, check: Callable[[], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            if check():
                return
            time.sleep(0.1)
        raise TimeoutError(f"prometheus on port {self.port} not {what} in time: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query straight through the HTTP API (for test set-up and waits)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = self._client.get(f"{self.url}/api/v1/query", params=params)
        response.raise_for_status()
        return response.json()["data"]["result"]

    def wait_for(self, promql: str, check: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 15.0):
        """Poll ``promql`` until ``check(result)`` holds; returns the result or raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if check(result):
                return result
            time.sleep(0.1)
        raise TimeoutError(f"{promql!r} did not meet the condition within {timeout_s} s; last result {result}")

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s). The data directory stays."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def close(self) -> None:
        self.stop()
        self._client.close()


def prepare(
    workdir: Path,
    targets: Sequence[str] = (),
    *,
    scrape_interval_s: float = 1.0,
    history: Sequence[Series] | str | None = None,
) -> Prometheus:
    """Write the config (and pre-load ``history``) under ``workdir``; do not start yet."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    if history is not None:
        load_history(data_dir, history)
    config = workdir / "prometheus.yml"
    write_config(config, targets, scrape_interval_s)
    return Prometheus(
        port=free_port(), data_dir=data_dir, config_path=config, log_path=workdir / "prometheus.log", targets=tuple(targets)
    )


@contextmanager
def running_prometheus(
    targets: Sequence[str],
    workdir: Path,
    *,
    scrape_interval_s: float = 1.0,
    history: Sequence[Series] | str | None = None,
    wait_for_targets: bool = True,
) -> Iterator[Prometheus]:
    """Start a Prometheus scraping ``targets`` (host:port) every ``scrape_interval_s``; stop it after."""
    prom = prepare(workdir, targets, scrape_interval_s=scrape_interval_s, history=history)
    try:
        prom.start(wait_for_targets=wait_for_targets)
        yield prom
    finally:
        prom.close()


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    """``start(targets, history=None, ...)`` -> a started Prometheus; all are stopped at teardown."""
    started: list[Prometheus] = []

    def start(targets: Sequence[str] = (), **kwargs: Any) -> Prometheus:
        wait = kwargs.pop("wait_for_targets", True)
        prom = prepare(tmp_path / f"prometheus-{len(started)}", targets, **kwargs)
        started.append(prom)
        return prom.start(wait_for_targets=wait)

    yield start
    for prom in started:
        prom.close()


# ------------------------------------------------------------------------------------ policies
def write_signal_policy(
    path: Path, worker_addresses: Sequence[str], *, signals: Mapping[str, Any] | None = None
) -> Path:
    """A policy file shaped like policies/default.yaml whose groups g1..gN have the given worker
    addresses (host:port, which is the ``instance`` label Prometheus gives each target).
    ``signals`` overrides keys of the ``signals`` section (window_s, staleness_s, queries...)."""
    import yaml

    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "policies" / "default.yaml").read_text())
    groups = []
    for i, address in enumerate(worker_addresses, start=1):
        groups.append({
            "name": f"g{i}",
            "worker_url": f"http://{address}",
            "nodes": [{"name": f"node-{i}a", "address": f"10.9.{i}.1"}, {"name": f"node-{i}b", "address": f"10.9.{i}.2"}],
        })  # fmt: skip
    base["fleet"]["groups"] = groups
    base["fleet"]["ceiling_groups"] = len(groups)
    base["fleet"]["floor_groups"] = 1
    base["signals"] = {**base.get("signals", {}), **(signals or {})}
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return path
