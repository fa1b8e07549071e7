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

Each entry is one pickle named ``<sha256>.pickle`` (the Trace with its rate windows, the load
scale, the info, and the warnings preparing it logged or raised, which a hit gives again). Pickles
run code when read: the folder is made only its owner can open (0700), and an entry is read only
from a folder and a file that the user running it owns and no one else can write (as ssh treats
its keys); otherwise the trace is prepared without the cache. At most ``MAX_ENTRIES`` entries and
``MAX_BYTES`` in all are kept (a 14-day ServeGen trace is about 12.6 MB; the newest entry always);
the least recently used go first, and only files named as entries are ever removed. An entry that cannot be read is prepared
again and written over; a folder that cannot be written is no error, nor is a home folder that
cannot be found (no cache then).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import re
import stat
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.policy.model import Policy
from autoscaler.sim import backtest
from autoscaler.sim.refcache import cache_home
from autoscaler.sim.traces import Trace

log = logging.getLogger(__name__)

_SIM = Path(__file__).resolve().parent
_CODE_FILES = (_SIM / "traces.py", _SIM / "loadscale.py", _SIM / "backtest.py", Path(__file__).resolve())
_DATA = _SIM / "data"
_POLICY_SECTIONS = ("fleet", "simulation")
FORMAT_VERSION = 1
MAX_ENTRIES = 8
MAX_BYTES = 1 << 30  # 1 GiB in all
_ENTRY = re.compile(r"^[0-9a-f]{64}\.pickle$")


def default_dir() -> Path | None:
    """``$XDG_CACHE_HOME/fleet-autoscaler/traces``, or under ``~/.cache``; None without either."""
    home = cache_home()
    return None if home is None else home / "traces"


def _file(h: Any, name: str, path: Path) -> None:
    """One file into the key: its name and its digest, each with its length (no two splits of the
    same bytes into files hash alike), read in blocks (a trace of gigabytes is not held in memory)."""
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").digest()
    h.update(f"{len(name)}:{name}:".encode() + digest)


def _code_digest(h: Any) -> None:
    for f in _CODE_FILES:
        _file(h, f.name, f)
    for f in sorted(_DATA.glob("*")) if _DATA.is_dir() else ():  # the length table the draws pick from
        if f.is_file():
            _file(h, f.name, f)
    h.update(f"numpy {np.__version__}".encode())


def _source_digest(h: Any, path: Path) -> None:
    """The trace's bytes: the file, or each regular file of a directory (by name; the loaders read
    no deeper)."""
    if path.is_dir():
        for f in sorted(path.iterdir()):
            if f.is_file():
                _file(h, f.name, f)
    else:
        _file(h, "", path)


def _cacheable(path: Path) -> bool:
    """A regular file or a folder (a pipe would be read up by the key, a device is no trace)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _trusted(path: Path) -> bool:
    """Owned by this user and writable by no one else (an entry is a pickle: whoever can write it
    runs code as the reader)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


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
    on a hit: a cached trace warns as the first run did. (Records below the first run's level never
    reach it: a later run at a more verbose level sees only those the first run kept.)"""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def prepare_trace(root: Path | None, path: str, fmt: str, policy: Policy, peak_utilization: float, seed: int,
                  start_at: datetime | None = None, skip_bad_rows: bool = False) -> tuple[Trace, float, dict]:
    """``backtest.prepare_trace`` through the cache under ``root`` (None: no cache)."""

    def prepare() -> tuple[Trace, float, dict]:
        return backtest.prepare_trace(path, fmt, policy, peak_utilization, seed, start_at, skip_bad_rows)

    if root is None or not _cacheable(Path(path)):  # (a missing path: the loader's own error)
        return prepare()
    try:
        key = cache_key(path, fmt, policy, peak_utilization, seed, start_at, skip_bad_rows)
    except OSError:  # unreadable: the loader says what is wrong
        return prepare()
    entry = root / f"{key}.pickle"
    hit = _read(root, entry)
    if hit is not None:
        for name, level, message in hit["logs"]:
            logging.getLogger(name).log(level, "%s", message)
        _warn_again(hit["warnings"])
        return hit["trace"], hit["factor"], hit["info"]
    capture = _Capture()
    top = logging.getLogger("autoscaler")
    top.addHandler(capture)
    try:
        with warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always")
            trace, factor, info = prepare()
    finally:
        top.removeHandler(capture)
    # (recorded to be given again on a hit; given now, through the filters the caller has)
    said = [(w.category.__name__, str(w.message), w.filename, w.lineno) for w in raised]
    _warn_again(said)
    _write(root, entry, {"version": FORMAT_VERSION, "trace": trace, "factor": factor, "info": info,
                         "logs": capture.records, "warnings": said})
    return trace, factor, info


def _warn_again(said: list[tuple[str, str, str, int]]) -> None:
    for category, message, filename, lineno in said:
        warnings.warn_explicit(message, _WARNINGS.get(category, RuntimeWarning), filename, lineno)


_WARNINGS: dict[str, type[Warning]] = {c.__name__: c for c in (
    Warning, UserWarning, RuntimeWarning, DeprecationWarning, FutureWarning, ResourceWarning)}


def _read(root: Path, entry: Path) -> dict | None:
    if not entry.exists():
        return None
    if not (_trusted(root) and _trusted(entry)):
        log.warning("trace cache %s: not read (a folder or file another user owns or can write: whoever can "
                    "write it runs code as this one); the trace is prepared again", entry)
        return None
    try:
        with entry.open("rb") as f:
            data = pickle.load(f)
    except Exception as exc:  # truncated, from another version, unreadable: prepared again
        log.debug("trace cache %s: unreadable (%s): prepared again", entry, exc)
        return None
    if not (isinstance(data, dict) and data.get("version") == FORMAT_VERSION and isinstance(data.get("trace"), Trace)
            and all(k in data for k in ("factor", "info", "logs", "warnings"))):
        return None
    try:
        os.utime(entry)  # (recently used: pruned last)
    except OSError:
        pass
    return data


def _write(root: Path, entry: Path, data: dict) -> None:
    """Store one entry (atomically) and keep the most recently used within ``MAX_ENTRIES`` and
    ``MAX_BYTES``; a cache that cannot be written is no error (the trace is prepared). Only files
    named as entries are removed: a folder given with ``--trace-cache`` may hold others."""
    tmp = entry.with_suffix(f".{os.getpid()}.tmp")
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tmp.open("wb") as f:
            pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o600)
        tmp.replace(entry)  # a concurrent reader sees the whole file or none
        _prune(root)
    except Exception as exc:  # (best effort: disk full, an interrupted write, a folder not ours)
        log.debug("trace cache %s: not written (%s)", root, exc)
    finally:
        try:
            tmp.unlink(missing_ok=True)  # (after the replace there is none; after a failure, the partial file)
        except OSError:
            pass


def _prune(root: Path) -> None:
    entries = []
    for p in root.iterdir():
        if _ENTRY.match(p.name):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
    entries.sort(key=lambda e: e[0], reverse=True)
    total = 0
    for i, (_, size, p) in enumerate(entries):
        total += size
        if i >= MAX_ENTRIES or (total > MAX_BYTES and i > 0):
            p.unlink(missing_ok=True)
