"""A cache of prepared traces (read and load-scaled), so that ``simulate`` reads and draws a trace
again only when something it depends on changed.

Preparing the 14-day ServeGen trace (parse 2,000 windows x 45 clients, then draw 300,000 arrivals
from them) takes about 0.7 s, 7% of a whole ``simulate --compare``; a user who tries policies one
after another on one trace pays it each time for the same arrays. The cache keeps the result.

Key (sha256 of all of it): the trace as given (its path as typed, and the bytes of the file, or of
every file in a ServeGen directory), the format asked for, the start time, ``--skip-bad-rows``, the
peak use, the seed, the policy sections load scaling reads (``fleet``, ``simulation``), the source
of the modules that read and scale a trace, and numpy's version (its generators draw the
arrivals). A changed file, setting or code is a new key; nothing is invalidated in place.

Each entry is one pickle (the Trace with its rate windows, the load scale, the info, and the
warnings preparing it logged, which a hit logs again). Pickles run code when read: the folder is
made only its owner can open (0700), as for any cache of one's own. At most ``MAX_ENTRIES`` are
kept (a 14-day trace is about 12 MB); the least recently used go first. An entry that cannot be
read is prepared again and written over; a folder that cannot be written is no error.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.policy.model import Policy
from autoscaler.sim import backtest
from autoscaler.sim.traces import Trace

log = logging.getLogger(__name__)

_SIM = Path(__file__).resolve().parent
_CODE_FILES = (_SIM / "traces.py", _SIM / "loadscale.py", _SIM / "backtest.py", Path(__file__).resolve())
_DATA = _SIM / "data"
_POLICY_SECTIONS = ("fleet", "simulation")
FORMAT_VERSION = 1
MAX_ENTRIES = 8


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/fleet-autoscaler/traces``, or under ``~/.cache``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleet-autoscaler" / "traces"


def _code_digest(h: Any) -> None:
    for f in _CODE_FILES:
        h.update(f.read_bytes())
    for f in sorted(_DATA.glob("*")) if _DATA.is_dir() else ():  # the length table the draws pick from
        if f.is_file():
            h.update(f.name.encode() + b"|" + f.read_bytes())
    h.update(f"numpy {np.__version__}".encode())


def _source_digest(h: Any, path: Path) -> None:
    """The trace's bytes: the file, or each regular file of a directory (by name; the loaders read
    no deeper). A path that is neither is left to the loader's own error."""
    if path.is_dir():
        for f in sorted(path.iterdir()):
            if f.is_file():
                h.update(f.name.encode() + b"|" + f.read_bytes() + b"|")
    else:
        h.update(path.read_bytes())


def cache_key(path: str, fmt: str, policy: Policy, peak_utilization: float, seed: int,
              start_at: datetime | None, skip_bad_rows: bool) -> str:
    h = hashlib.sha256()
    h.update(f"v{FORMAT_VERSION}".encode())
    _code_digest(h)
    _source_digest(h, Path(path))
    h.update(repr((str(path), fmt, None if start_at is None else start_at.isoformat(), bool(skip_bad_rows),
                   float(peak_utilization), int(seed))).encode())
    for section in _POLICY_SECTIONS:
        h.update(getattr(policy, section).model_dump_json().encode())
    return h.hexdigest()


class _Capture(logging.Handler):
    """The records preparing a trace logs (load scaling's few-requests warning, ...), to log again
    on a hit: a cached trace warns as the first run did."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def prepare_trace(root: Path | None, path: str, fmt: str, policy: Policy, peak_utilization: float, seed: int,
                  start_at: datetime | None = None, skip_bad_rows: bool = False) -> tuple[Trace, float, dict]:
    """``backtest.prepare_trace`` through the cache under ``root`` (None: no cache)."""
    if root is None or not Path(path).exists():
        return backtest.prepare_trace(path, fmt, policy, peak_utilization, seed, start_at, skip_bad_rows)
    try:
        key = cache_key(path, fmt, policy, peak_utilization, seed, start_at, skip_bad_rows)
    except OSError:  # unreadable: the loader says what is wrong
        return backtest.prepare_trace(path, fmt, policy, peak_utilization, seed, start_at, skip_bad_rows)
    entry = root / f"{key}.pickle"
    hit = _read(entry)
    if hit is not None:
        for name, level, message in hit["logs"]:
            logging.getLogger(name).log(level, "%s", message)
        return hit["trace"], hit["factor"], hit["info"]
    capture = _Capture()
    top = logging.getLogger("autoscaler")
    top.addHandler(capture)
    try:
        trace, factor, info = backtest.prepare_trace(path, fmt, policy, peak_utilization, seed, start_at,
                                                     skip_bad_rows)
    finally:
        top.removeHandler(capture)
    _write(root, entry, {"version": FORMAT_VERSION, "trace": trace, "factor": factor, "info": info,
                         "logs": capture.records})
    return trace, factor, info


def _read(entry: Path) -> dict | None:
    try:
        with entry.open("rb") as f:
            data = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as exc:  # truncated, from another version, unreadable: prepared again
        log.debug("trace cache %s: unreadable (%s): prepared again", entry, exc)
        return None
    if not (isinstance(data, dict) and data.get("version") == FORMAT_VERSION and isinstance(data.get("trace"), Trace)):
        return None
    try:
        os.utime(entry)  # (recently used: pruned last)
    except OSError:
        pass
    return data


def _write(root: Path, entry: Path, data: dict) -> None:
    """Store one entry (atomically) and keep the ``MAX_ENTRIES`` most recently used; a cache that
    cannot be written is no error (the trace is prepared)."""
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as f:
            pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(entry)  # a concurrent reader sees the whole file or none
        entries = sorted(root.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("trace cache %s: not written (%s)", root, exc)
