"""Trace loaders for the backtest: Azure, Mooncake, ServeGen and plain CSV, into numpy arrays.

A per-request trace becomes a ``Trace`` (arrival times and token counts, sorted by arrival).
ServeGen gives per-client request rates per 600 s window, not requests; it becomes a
``RateTrace`` and ``autoscaler.sim.loadscale.scale_trace`` draws its arrivals once the load
scale is known. Formats, errors and the choices made here are documented in docs/traces.md.

Every malformed row is a ``BadInput`` whose one-line message is ``FILE:LINE: what is wrong``,
e.g. ``trace.csv:17: output_tokens: -3 is negative``; with ``skip_bad_rows=True`` such rows are
skipped and counted in ``bad_rows`` instead.

Values no real trace has are bad rows too, so that one outlier cannot distort a backtest: more
than ``MAX_TOKENS`` tokens in one request (one row of 10^14 input tokens made load scaling thin a
2,002-request trace to 1 request), a time more than ``MAX_GAP_S`` after the previous row or after
``MAX_EPOCH_S`` (a far-future row would otherwise become the reference every later row is "out of
order" against: the outlier is the bad row, not everything after it), a ServeGen rate above
``MAX_RATE_PER_S``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autoscaler.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from autoscaler.sim.loadscale import LoadScale

FORMATS = ("azure", "mooncake", "servegen", "csv")

# Traces without absolute times start here unless start_at says otherwise (docs/interfaces.md,
# "Time in traces"): Monday 2026-01-05 00:00 UTC.
DEFAULT_START = datetime(2026, 1, 5, tzinfo=timezone.utc)

SERVEGEN_WINDOW_S = 600.0
SERVEGEN_FILE_GLOB = "chunk-*-trace.csv"
SERVEGEN_FAMILIES = {"": 0, "Gamma": 1, "Weibull": 2}  # 0 = Poisson at `rate` (no fitted family)
POISSON, GAMMA, WEIBULL = 0, 1, 2

# A csv `timestamp_s` at or above this is seconds since the Unix epoch (2001-09-09 onwards);
# below it, seconds since the start of the trace (a relative trace is never 31 years long).
EPOCH_THRESHOLD_S = 1e9

# Plausibility: no model serves a request of more than 10 million tokens (the longest contexts
# are about 1-2 million); no trace pauses for more than a year between two requests; no absolute
# time is after 2100-01-01; no client of one model sends 100,000 requests per second.
MAX_TOKENS = 10_000_000
MAX_GAP_S = 366 * 86400.0
MAX_EPOCH_S = 4_102_444_800.0  # 2100-01-01T00:00:00Z
MAX_RATE_PER_S = 100_000.0

# Mooncake: a prefix block ends a shared system prompt (not a conversation) when at least this
# share of all requests pass through it AND at least SHARED_BLOCK_MIN_BRANCHES distinct blocks
# follow it (see mooncake_sessions and docs/traces.md).
SHARED_BLOCK_MIN_SHARE = 0.05
SHARED_BLOCK_MIN_BRANCHES = 3

_AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_CSV_REQUIRED = ("timestamp_s", "input_tokens", "output_tokens")
_CSV_OPTIONAL = ("session_id",)
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_SERVEGEN_COLUMNS = ("t_sec", "rate", "cv", "pat", "shape", "scale")


@dataclass(eq=False)
class Trace:
    """A per-request trace, sorted by arrival."""

    format: str  # "azure" | "mooncake" | "servegen" | "csv"
    path: str
    start_epoch_s: float  # UTC epoch seconds of t = 0
    t_s: np.ndarray  # float64 arrival times, seconds since start_epoch_s, non-decreasing
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    session: np.ndarray  # int64 session/prefix key, -1 = none
    prefix_blocks: list[tuple[int, ...]] | None  # mooncake hash_ids per request, else None
    span_s: tuple[float, float]  # (first, last) arrival, or the full window span for ServeGen
    requests_read: int  # rows read before scaling (bad rows included)
    bad_rows: int  # rows skipped with skip_bad_rows
    gap_windows: list[tuple[float, float]]  # ServeGen collection gaps, seconds since start
    load_scale: LoadScale | None = None  # set by loadscale.scale_trace: how this trace was scaled
    # ServeGen: the rate windows this trace was drawn from (loadscale.draw_rate_trace), so the rate
    # oracle can draw the same windows again with other seeds; None for recorded arrivals.
    rate_source: RateTrace | None = None

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    @property
    def start(self) -> datetime:
        return datetime.fromtimestamp(self.start_epoch_s, tz=timezone.utc)

    def select(self, keep: np.ndarray) -> Trace:
        """The requests where the boolean mask ``keep`` is true; span and counts unchanged."""
        blocks = None
        if self.prefix_blocks is not None:
            blocks = [b for b, k in zip(self.prefix_blocks, keep.tolist()) if k]
        return Trace(
            format=self.format,
            path=self.path,
            start_epoch_s=self.start_epoch_s,
            t_s=self.t_s[keep],
            input_tokens=self.input_tokens[keep],
            output_tokens=self.output_tokens[keep],
            session=self.session[keep],
            prefix_blocks=blocks,
            span_s=self.span_s,
            requests_read=self.requests_read,
            bad_rows=self.bad_rows,
            gap_windows=list(self.gap_windows),
        )


@dataclass(eq=False)
class RateTrace:
    """ServeGen: request rates per client per window, before arrivals are drawn.

    Arrays are (clients, windows). ``family`` is POISSON (0: no fitted family, Poisson at
    ``rate``), GAMMA (1) or WEIBULL (2); ``shape``/``scale`` are the fitted inter-arrival
    parameters in seconds as read. A client without a row for a window has rate 0 there.
    """

    format: str  # "servegen"
    path: str
    start_epoch_s: float  # UTC epoch seconds of t_sec = 0
    window_s: float  # 600
    window_start_s: np.ndarray  # float64 (windows,), seconds since start_epoch_s
    clients: list[str]  # one name per client (its file name)
    rate: np.ndarray  # float64 (clients, windows), mean requests/s
    cv: np.ndarray  # float64 (clients, windows), as read (not used to draw)
    family: np.ndarray  # int8 (clients, windows)
    shape: np.ndarray  # float64 (clients, windows)
    scale: np.ndarray  # float64 (clients, windows)
    span_s: tuple[float, float]  # first window start to last window end
    requests_read: int  # rows read (bad rows included)
    bad_rows: int
    gap_windows: list[tuple[float, float]]  # windows where every client reads 0 at once

    @property
    def total_rate(self) -> np.ndarray:
        """Summed client rates per window (requests/s)."""
        return self.rate.sum(axis=0)

    @property
    def start(self) -> datetime:
        return datetime.fromtimestamp(self.start_epoch_s, tz=timezone.utc)


class _RowError(Exception):
    """One bad row; the loader adds FILE:LINE."""


# --------------------------------------------------------------------------------- public entry
def load_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    start_at: datetime | None = None,
    skip_bad_rows: bool = False,
) -> Trace | RateTrace:
    """Load a trace file (or a ServeGen directory).

    ``fmt`` is "auto" or one of FORMATS. ``start_at`` places t = 0 of a trace without absolute
    times (Mooncake, ServeGen, a relative csv); a naive datetime is UTC. Absolute traces (Azure,
    an epoch csv) keep their own times. Raises BadInput for a missing or unrecognised file, a
    malformed row (unless ``skip_bad_rows``) and an empty trace.
    """
    p = Path(path)
    display = str(path)
    if not p.exists():
        raise BadInput(f"{display}: no such file or directory")
    if fmt == "auto":
        fmt = detect_format(p)
    if fmt not in FORMATS:
        raise BadInput(f"{display}: trace format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    start_epoch = _start_epoch(start_at)
    if fmt == "servegen":
        if not p.is_dir():
            raise BadInput(f"{display}: a ServeGen trace is a directory of {SERVEGEN_FILE_GLOB} files")
        return _load_servegen(p, display, start_epoch, skip_bad_rows)
    if p.is_dir():
        raise BadInput(f"{display}: is a directory; only a ServeGen trace is a directory")
    loader = {"azure": _load_azure, "mooncake": _load_mooncake, "csv": _load_csv}[fmt]
    return loader(p, display, start_epoch, skip_bad_rows)


def detect_format(path: str | Path) -> str:
    """Recognise a trace by its content (docs/traces.md, "Auto-detection")."""
    p = Path(path)
    display = str(path)
    if p.is_dir():
        if _servegen_files(p):
            return "servegen"
        raise BadInput(f"{display}: directory holds no ServeGen {SERVEGEN_FILE_GLOB} files")
    first = _first_line(p, display)
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and all(k in obj for k in _MOONCAKE_KEYS):
            return "mooncake"
    cells = [c.strip() for c in first.split(",")]
    if cells[:2] == list(_AZURE_HEADER[:2]):
        return "azure"
    if cells[:1] == ["timestamp_s"]:
        return "csv"
    shown = first if len(first) <= 60 else first[:57] + "..."
    raise BadInput(
        f"{display}: not a recognised trace (first line {shown!r}); expected a ServeGen directory, "
        "Mooncake JSONL, an Azure CSV (TIMESTAMP,ContextTokens,...) or a CSV with header "
        "timestamp_s,input_tokens,output_tokens"
    )


# --------------------------------------------------------------------------------- helpers
def _start_epoch(start_at: datetime | None) -> float:
    if start_at is None:
        return DEFAULT_START.timestamp()
    if start_at.tzinfo is None:  # docs/interfaces.md: times without a zone are UTC
        start_at = start_at.replace(tzinfo=timezone.utc)
    return start_at.timestamp()


def _first_line(p: Path, display: str) -> str:
    try:
        with open(p, encoding="utf-8-sig", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    return line.strip()
    except OSError as exc:
        raise BadInput(f"{display}: cannot read: {exc.strerror or exc}") from exc
    raise BadInput(f"{display}: empty file, no requests")


def _open_text(p: Path, display: str):
    try:
        return open(p, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise BadInput(f"{display}: cannot read: {exc.strerror or exc}") from exc


def _tokens(name: str, value: int) -> int:
    if value > MAX_TOKENS:
        raise _RowError(f"{name}: {value:,} is not a plausible token count (at most {MAX_TOKENS:,} per request)")
    return value


def _nonneg_int(name: str, text: str) -> int:
    s = text.strip()
    if not s:
        raise _RowError(f"{name}: missing value")
    try:
        v = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise _RowError(f"{name}: {s!r} is not a number") from None
        if not math.isfinite(f) or f != math.floor(f):
            raise _RowError(f"{name}: {s!r} is not a whole number") from None
        v = int(f)
    if v < 0:
        raise _RowError(f"{name}: {v} is negative")
    return v


def _nonneg_float(name: str, text: str) -> float:
    # float() ignores the surrounding whitespace itself: the text is stripped only to name a bad
    # value (400,000 calls for the 14-day ServeGen trace).
    try:
        v = float(text)
    except ValueError:
        s = text.strip()
        raise _RowError(f"{name}: {s!r} is not a number" if s else f"{name}: missing value") from None
    if not math.isfinite(v):
        raise _RowError(f"{name}: {text.strip()!r} is not a finite number")
    if v < 0:
        raise _RowError(f"{name}: {text.strip()} is negative")
    return v


def _column_count(row: list[str], names: tuple[str, ...] | list[str]) -> None:
    if len(row) < len(names):
        raise _RowError(f"{names[len(row)]}: missing column (expected {len(names)} columns, got {len(row)})")
    if len(row) > len(names):
        raise _RowError(f"expected {len(names)} columns ({','.join(names)}), got {len(row)}")


def _in_order(name: str, shown: str, t: float, last: float | None, last_shown: str) -> None:
    """``t`` (seconds) must not be before the previous row's, nor implausibly far after it."""
    if last is not None and t < last:
        raise _RowError(f"{name}: {shown} is out of order (before the previous row's {last_shown})")
    if last is not None and t - last > MAX_GAP_S:
        raise _RowError(f"{name}: {shown} is {(t - last) / 86400:,.0f} days after the previous row's {last_shown}; "
                        f"no real trace pauses that long")


def _plausible_epoch(name: str, shown: str, t: float) -> None:
    if t >= MAX_EPOCH_S:
        raise _RowError(f"{name}: {shown} is after 2100-01-01; not a plausible time")


def _finish(
    fmt: str,
    display: str,
    start_epoch_s: float,
    t: list[float],
    inp: list[int],
    out: list[int],
    session: np.ndarray | None,
    blocks: list[tuple[int, ...]] | None,
    read: int,
    bad: int,
) -> Trace:
    if not t:
        why = f" ({bad} bad rows skipped)" if bad else ""
        raise BadInput(f"{display}: empty trace, no requests{why}")
    t_s = np.asarray(t, dtype=np.float64)
    n = t_s.shape[0]
    return Trace(
        format=fmt,
        path=display,
        start_epoch_s=float(start_epoch_s),
        t_s=t_s,
        input_tokens=np.asarray(inp, dtype=np.int64),
        output_tokens=np.asarray(out, dtype=np.int64),
        session=session if session is not None else np.full(n, -1, dtype=np.int64),
        prefix_blocks=blocks,
        span_s=(float(t_s[0]), float(t_s[-1])),
        requests_read=read,
        bad_rows=bad,
        gap_windows=[],
    )


def _csv_error(exc: csv.Error) -> str:
    """The csv module's error in a row's terms: its field limit is 131,072 characters, which no
    field of a request (a time or a token count) comes near."""
    if "field larger than field limit" in str(exc):
        return f"a field is longer than {csv.field_size_limit():,} characters: not a request"
    return f"not CSV: {exc}"


def _header(reader: Any, display: str) -> list[str] | None:
    """The first row of a CSV file (None: the file is empty); a malformed one is bad input at line 1."""
    try:
        return next(reader, None)
    except csv.Error as exc:
        raise BadInput(f"{display}:1: header: {_csv_error(exc)}") from None


def _rows(reader: Any, display: str, skip: bool, parse: Callable[[list[str]], None]) -> tuple[int, int]:
    """Feed non-blank csv rows to ``parse``; return (rows read, bad rows).

    Only a line with nothing on it (or only spaces) is blank. A row of empty cells (``,,``) is a
    bad row like any other: it was dropped without a count, so a trace cut into commas by an export
    looked complete."""
    read = bad = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field over the reader's limit (131,072 characters), a stray NUL...
            # The reader has consumed the offending line and goes on with the next one.
            read += 1
            if not skip:
                raise BadInput(f"{display}:{reader.line_num}: {_csv_error(exc)}") from None
            bad += 1
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # blank line
        read += 1
        try:
            if not row[0].strip() and all(not c.strip() for c in row):  # (most rows: the first cell says no)
                raise _RowError(f"every cell is empty ({','.join(row) or 'an empty row'}): not a request")
            parse(row)
        except _RowError as exc:
            if not skip:
                raise BadInput(f"{display}:{reader.line_num}: {exc}") from None
            bad += 1
    return read, bad


# --------------------------------------------------------------------------------- azure
def _azure_time(text: str) -> float:
    s = text.strip()
    if not s:
        raise _RowError("TIMESTAMP: missing value")
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise _RowError(f"TIMESTAMP: {s!r} is not a date and time") from None
    if dt.tzinfo is None:  # Azure timestamps are UTC (examples/traces/README.md)
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _load_azure(p: Path, display: str, _start: float, skip: bool) -> Trace:
    # Absolute times: t = 0 is the first request; start_at does not apply.
    epoch: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    last: list[Any] = [None, ""]

    def parse(row: list[str]) -> None:
        _column_count(row, _AZURE_HEADER)
        ts = _azure_time(row[0])
        _plausible_epoch("TIMESTAMP", row[0].strip(), ts)
        i = _tokens("ContextTokens", _nonneg_int("ContextTokens", row[1]))
        o = _tokens("GeneratedTokens", _nonneg_int("GeneratedTokens", row[2]))
        _in_order("TIMESTAMP", row[0].strip(), ts, last[0], last[1])
        last[0], last[1] = ts, row[0].strip()
        epoch.append(ts)
        inp.append(i)
        out.append(o)

    with _open_text(p, display) as fh:
        reader = csv.reader(fh)
        header = _header(reader, display)
        if header is None or tuple(c.strip() for c in header) != _AZURE_HEADER:
            got = ",".join(header or [])
            raise BadInput(f"{display}:1: header: expected {','.join(_AZURE_HEADER)}, got {got!r}")
        read, bad = _rows(reader, display, skip, parse)
    start = epoch[0] if epoch else 0.0
    t = (np.asarray(epoch, dtype=np.float64) - start).tolist()
    return _finish("azure", display, start, t, inp, out, None, None, read, bad)


# --------------------------------------------------------------------------------- csv
def _load_csv(p: Path, display: str, start_epoch: float, skip: bool) -> Trace:
    raw_t: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    sess: list[int] = []
    session_ids: dict[str, int] = {}  # session_id text -> int, numbered in order of first appearance
    last: list[Any] = [None, ""]

    with _open_text(p, display) as fh:
        reader = csv.reader(fh)
        header = _header(reader, display)
        names = [c.strip() for c in (header or [])]
        for name in _CSV_REQUIRED:
            if name not in names:
                raise BadInput(f"{display}:1: header: missing column {name} (expected {','.join(_CSV_REQUIRED)}[,session_id])")
        for name in names:
            if name not in _CSV_REQUIRED + _CSV_OPTIONAL:
                raise BadInput(f"{display}:1: header: unknown column {name!r}")
        if len(set(names)) != len(names):
            raise BadInput(f"{display}:1: header: a column is named twice")
        col = {name: i for i, name in enumerate(names)}
        has_session = "session_id" in col

        def parse(row: list[str]) -> None:
            _column_count(row, names)
            ts_text = row[col["timestamp_s"]].strip()
            ts = _nonneg_float("timestamp_s", ts_text)
            _plausible_epoch("timestamp_s", ts_text, ts)
            if MAX_GAP_S < ts < EPOCH_THRESHOLD_S:  # relative seconds, or epoch seconds before 2001
                raise _RowError(f"timestamp_s: {ts_text} is neither seconds since the trace's start (at most a "
                                f"year) nor since the Unix epoch (from 2001 on); not a plausible time")
            i = _tokens("input_tokens", _nonneg_int("input_tokens", row[col["input_tokens"]]))
            o = _tokens("output_tokens", _nonneg_int("output_tokens", row[col["output_tokens"]]))
            _in_order("timestamp_s", ts_text, ts, last[0], last[1])
            last[0], last[1] = ts, ts_text
            key = -1
            if has_session:
                sid = row[col["session_id"]].strip()
                if sid:
                    key = session_ids.setdefault(sid, len(session_ids))
            raw_t.append(ts)
            inp.append(i)
            out.append(o)
            sess.append(key)

        read, bad = _rows(reader, display, skip, parse)
    if raw_t and raw_t[0] >= EPOCH_THRESHOLD_S:
        start = raw_t[0]  # epoch seconds: t = 0 is the first request
        t = (np.asarray(raw_t, dtype=np.float64) - start).tolist()
    else:
        start, t = start_epoch, raw_t  # relative: t as written, from start_at
    return _finish("csv", display, start, t, inp, out, np.asarray(sess, dtype=np.int64), None, read, bad)


# --------------------------------------------------------------------------------- mooncake
def _json_int(obj: dict[str, Any], key: str) -> int:
    if key not in obj:
        raise _RowError(f"{key}: missing")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _RowError(f"{key}: {v!r} is not a whole number")
    if v < 0:
        raise _RowError(f"{key}: {v} is negative")
    return v


def _load_mooncake(p: Path, display: str, start_epoch: float, skip: bool) -> Trace:
    t: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    blocks: list[tuple[int, ...]] = []
    read = bad = 0
    last_ms: float | None = None
    with _open_text(p, display) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            read += 1
            try:
                try:
                    obj = json.loads(line.rstrip("\r\n"))  # so a column is on this line
                except json.JSONDecodeError as exc:
                    raise _RowError(f"bad JSON: {exc.msg} (column {exc.colno})") from None
                except ValueError as exc:  # e.g. a number too large to convert
                    raise _RowError(f"bad JSON: {exc}") from None
                if not isinstance(obj, dict):
                    raise _RowError(f"bad JSON: expected an object, got {type(obj).__name__}")
                if "timestamp" not in obj:
                    raise _RowError("timestamp: missing")
                ms = obj["timestamp"]
                if isinstance(ms, bool) or not isinstance(ms, (int, float)):
                    raise _RowError(f"timestamp: {ms!r} is not a number")
                if not math.isfinite(ms):
                    raise _RowError(f"timestamp: {ms!r} is not a finite number")
                if ms < 0:
                    raise _RowError(f"timestamp: {ms} is negative")
                if ms / 1000.0 > MAX_GAP_S:  # milliseconds since the trace's start
                    raise _RowError(f"timestamp: {ms} ms is more than a year after the trace's start; "
                                    f"not a plausible time")
                i = _tokens("input_length", _json_int(obj, "input_length"))
                o = _tokens("output_length", _json_int(obj, "output_length"))
                if "hash_ids" not in obj:
                    raise _RowError("hash_ids: missing")
                h = obj["hash_ids"]
                if not isinstance(h, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in h):
                    raise _RowError("hash_ids: not a list of non-negative whole numbers")
                _in_order("timestamp", str(ms), ms / 1000.0, None if last_ms is None else last_ms / 1000.0,
                          str(last_ms))
            except _RowError as exc:
                if not skip:
                    raise BadInput(f"{display}:{lineno}: {exc}") from None
                bad += 1
                continue
            last_ms = ms
            t.append(ms / 1000.0)
            inp.append(i)
            out.append(o)
            blocks.append(tuple(h))
    return _finish("mooncake", display, start_epoch, t, inp, out, mooncake_sessions(blocks), blocks, read, bad)


def mooncake_sessions(blocks: list[tuple[int, ...]]) -> np.ndarray:
    """Session key per request: its first prefix block after the shared system prompt.

    Equal ids at the same position mean equal prefixes, so (position, id) is a node of a prefix
    tree. A node ends a shared system prompt when at least SHARED_BLOCK_MIN_SHARE of all requests
    pass through it and at least SHARED_BLOCK_MIN_BRANCHES distinct blocks follow it (the root of
    several conversations, not one long conversation that dominates a short trace). The key is
    the block after the deepest such node on the request's path, or its first block if there is
    none; a request made only of shared blocks gets -1. In the vendored conversation trace block
    0 opens all 12,031 requests and 7,373 distinct blocks follow it, so the key is hash_ids[1]:
    the conversation, whose later turns repeat it (block 7402 opens one of 43 turns).
    """
    n = len(blocks)
    min_holders = max(2, math.ceil(SHARED_BLOCK_MIN_SHARE * n))
    frequent: dict[tuple[int, int], set[int]] = {}  # node -> distinct blocks that follow it
    walking = [b for b in blocks if b]  # requests whose path so far is all frequent nodes
    depth = 0
    while walking:
        counts: dict[int, int] = {}
        for b in walking:
            counts[b[depth]] = counts.get(b[depth], 0) + 1
        nodes = {h for h, c in counts.items() if c >= min_holders}
        walking = [b for b in walking if b[depth] in nodes]
        for h in nodes:
            frequent[(depth, h)] = set()
        for b in walking:
            if len(b) > depth + 1:
                frequent[(depth, b[depth])].add(b[depth + 1])
        walking = [b for b in walking if len(b) > depth + 1]
        depth += 1
    out = np.full(n, -1, dtype=np.int64)
    for r, b in enumerate(blocks):
        cut = 0  # blocks b[:cut] are the shared prompt
        for p, h in enumerate(b):
            followers = frequent.get((p, h))
            if followers is None:
                break
            if len(followers) >= SHARED_BLOCK_MIN_BRANCHES:
                cut = p + 1
        if cut < len(b):
            out[r] = b[cut]
    return out


# --------------------------------------------------------------------------------- servegen
_CHUNK_RE = re.compile(r"^chunk-(\d+)-trace\.csv$")


def _servegen_files(d: Path) -> list[Path]:
    numbered = [(int(m.group(1)), f) for f in d.glob(SERVEGEN_FILE_GLOB) if f.is_file()
                and (m := _CHUNK_RE.match(f.name)) is not None]
    return [f for _, f in sorted(numbered, key=lambda nf: nf[0])]


def _load_servegen(d: Path, display: str, start_epoch: float, skip: bool) -> RateTrace:
    files = _servegen_files(d)
    if not files:
        raise BadInput(f"{display}: directory holds no ServeGen {SERVEGEN_FILE_GLOB} files")
    per_client: list[np.ndarray] = []  # per file: (rows, 6) window index, rate, cv, family, shape, scale
    read = bad = 0
    for f in files:
        fdisplay = str(Path(display) / f.name)
        try:
            text = f.read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise BadInput(f"{fdisplay}: cannot read: {exc.strerror or exc}") from exc
        parsed, r, b = _servegen_rows(text, fdisplay, skip)
        read += r
        bad += b
        per_client.append(parsed)

    w = SERVEGEN_WINDOW_S
    keys = np.concatenate([rows[:, 0] for rows in per_client]).astype(np.int64)
    if keys.size == 0:
        raise BadInput(f"{display}: empty trace, no windows" + (f" ({bad} bad rows skipped)" if bad else ""))
    k0, k1 = int(keys.min()), int(keys.max())
    nw = k1 - k0 + 1
    nc = len(files)
    rate = np.zeros((nc, nw))
    cv = np.zeros((nc, nw))
    family = np.zeros((nc, nw), dtype=np.int8)
    shape = np.zeros((nc, nw))
    scale = np.zeros((nc, nw))
    for c, rows in enumerate(per_client):
        idx = rows[:, 0].astype(np.int64) - k0
        rate[c, idx] = rows[:, 1]
        cv[c, idx] = rows[:, 2]
        family[c, idx] = rows[:, 3].astype(np.int8)
        shape[c, idx] = rows[:, 4]
        scale[c, idx] = rows[:, 5]
    total = rate.sum(axis=0)
    if not (total > 0).any():
        raise BadInput(f"{display}: empty trace, every client reads 0 in every window")
    starts = (np.arange(nw, dtype=np.float64) + k0) * w
    # A window where every client reads 0 at once is a gap in collection, not idle time.
    gaps = [(float(s), float(s + w)) for s in starts[total == 0]]
    return RateTrace(
        format="servegen",
        path=display,
        start_epoch_s=float(start_epoch),
        window_s=w,
        window_start_s=starts,
        clients=[f.name for f in files],
        rate=rate,
        cv=cv,
        family=family,
        shape=shape,
        scale=scale,
        span_s=(float(starts[0]), float(starts[-1] + w)),
        requests_read=read,
        bad_rows=bad,
        gap_windows=gaps,
    )



def _numbers(row: list[str]) -> tuple[float, float, float, float, float] | None:
    """A ServeGen row's five numbers (t_sec, rate, cv, shape, scale) when it has six columns and each
    is what ``_nonneg_float`` accepts (a finite number >= 0), else None: the same values, read in
    one step instead of five calls (86,688 rows in the 14-day trace)."""
    if len(row) != 6:
        return None
    try:
        t, rate, cv, shape, scale = float(row[0]), float(row[1]), float(row[2]), float(row[4]), float(row[5])
    except ValueError:
        return None
    inf = math.inf
    if 0.0 <= t < inf and 0.0 <= rate < inf and 0.0 <= cv < inf and 0.0 <= shape < inf and 0.0 <= scale < inf:
        return t, rate, cv, shape, scale
    return None


def _servegen_rows(text: str, display: str, skip: bool) -> tuple[np.ndarray, int, int]:
    """One client file, row by row, with FILE:LINE errors: the one set of ServeGen rules (a
    vectorised fast path would have to repeat them; this costs 0.1 s more on the 14-day trace)."""
    w = SERVEGEN_WINDOW_S
    rows: list[tuple[float, float, float, float, float, float]] = []
    last: list[Any] = [None]

    def parse(row: list[str]) -> None:
        # Most rows have six columns and five finite numbers >= 0, read here at once (NaN fails
        # both comparisons); for any other row, the columns and each number are checked in turn,
        # and the first that fails is named.
        nums = _numbers(row)
        if nums is None:
            _column_count(row, _SERVEGEN_COLUMNS)
        t = nums[0] if nums else _nonneg_float("t_sec", row[0])
        if t % w:
            raise _RowError(f"t_sec: {row[0].strip()} is not a multiple of the {w:g} s window")
        k = t // w
        if last[0] is not None and k <= last[0]:
            raise _RowError(f"t_sec: {row[0].strip()} is out of order (not after {last[0] * w:g})")
        rate = nums[1] if nums else _nonneg_float("rate", row[1])
        if rate > MAX_RATE_PER_S:
            raise _RowError(f"rate: {row[1].strip()} requests/s is not plausible for one client "
                            f"(at most {MAX_RATE_PER_S:,.0f})")
        cv = nums[2] if nums else _nonneg_float("cv", row[2])
        pat = row[3].strip()
        if pat not in SERVEGEN_FAMILIES:
            raise _RowError(f"pat: {pat!r} is not Gamma, Weibull or empty")
        fam = SERVEGEN_FAMILIES[pat]
        shape = nums[3] if nums else _nonneg_float("shape", row[4])
        scale = nums[4] if nums else _nonneg_float("scale", row[5])
        if rate > 0 and fam != POISSON and shape <= 0:
            raise _RowError(f"shape: {row[4].strip()} must be above 0 for a {pat} client with rate {rate:g}")
        last[0] = k
        rows.append((k, rate, cv, float(fam), shape, scale))

    read, bad = _rows(csv.reader(text.splitlines()), display, skip, parse)
    return np.array(rows, dtype=np.float64).reshape(-1, 6), read, bad


__all__ = [
    "DEFAULT_START",
    "FORMATS",
    "GAMMA",
    "POISSON",
    "RateTrace",
    "SERVEGEN_WINDOW_S",
    "Trace",
    "WEIBULL",
    "detect_format",
    "load_trace",
    "mooncake_sessions",
]
