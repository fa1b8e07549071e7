"""A cache of reference replays' summaries, so that ``simulate --compare`` replays a reference
only when something it depends on changed.

Key of one reference run (sha256 of all of it): the scaled trace as replayed (arrival times,
token counts, sessions, prefix blocks, span, start), the load scale, the seed, the policy sections
a reference reads (``fleet``, ``simulation``, ``slo`` less its error budget, ``signals``, ``drain``:
the scaling and forecast sections and the budget are ours alone), the warm-up (``simulate --warmup-hours``; a cold start, 0, adds
nothing, so its keys are those from before warm-ups existed), the reference's name (its kind and setting, e.g. ``kpa@0.5``)
and the source of the modules that replay and judge it (the fleet model, the controllers, the
peers, the summary). A changed trace, fleet, peer setting or model code is a new key; nothing is
ever invalidated in place. Each entry is one small JSON file named by its key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.policy.model import Policy
from autoscaler.sim.traces import Trace

_SIM = Path(__file__).resolve().parent
_CODE_FILES = (_SIM / "engine.py", _SIM / "controllers.py", _SIM / "peers.py", _SIM / "backtest.py",
               _SIM.parent / "core" / "victim.py")
_POLICY_SECTIONS = ("fleet", "simulation", "slo", "signals", "drain")


def cache_home() -> Path | None:
    """``$XDG_CACHE_HOME/fleet-autoscaler``, or under ``~/.cache``; None when neither is known (no
    home folder: a service account, a bare container), and nothing is cached."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            return None
    return Path(base) / "fleet-autoscaler"


def default_dir() -> Path | None:
    """``cache_home()/references``: None without one (every reference is replayed)."""
    home = cache_home()
    return None if home is None else home / "references"


def _code_digest() -> bytes:
    h = hashlib.sha256()
    for f in _CODE_FILES:
        h.update(f.read_bytes())
    return h.digest()


def trace_digest(trace: Trace) -> bytes:
    h = hashlib.sha256()
    for arr in (trace.t_s, trace.input_tokens, trace.output_tokens, trace.session):
        h.update(np.ascontiguousarray(arr).tobytes())
        h.update(b"|")
    if trace.prefix_blocks is not None:
        h.update(repr(trace.prefix_blocks).encode())
    h.update(repr((trace.span_s, trace.start_epoch_s)).encode())
    return h.digest()


class ReferenceCache:
    """Summaries of reference runs under ``root``, keyed as the module docstring says."""

    def __init__(self, root: Path, trace: Trace, factor: float, seed: int, policy: Policy, warmup_s: float = 0.0):
        self.root = root
        h = hashlib.sha256()
        h.update(_code_digest())
        h.update(trace_digest(trace))
        h.update(repr((float(factor), int(seed))).encode())
        if warmup_s > 0:
            h.update(repr(("warmup_s", float(warmup_s))).encode())
        for section in _POLICY_SECTIONS:
            # (the error budget is ours alone: no reference reads it, so a frontier's budgets and a
            # changed default share one cache; the TTFT target and percentile do score them)
            exclude = {"capacity_miss_budget_pct"} if section == "slo" else None
            h.update(getattr(policy, section).model_dump_json(exclude=exclude).encode())
        self._base = h.copy()

    def key(self, name: str) -> str:
        h = self._base.copy()
        h.update(name.encode())
        return h.hexdigest()

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.root / f"{self.key(name)}.json").read_text())
        except (OSError, ValueError):
            return None  # absent or unreadable: replayed again
        return data if isinstance(data, dict) and data.get("name") == name else None

    def put(self, name: str, summary: dict[str, Any]) -> None:
        """Store one summary; a cache that cannot be written is no error (the replay is done)."""
        path = self.root / f"{self.key(name)}.json"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"name": name, "summary": summary}))
            tmp.replace(path)  # atomic: a concurrent reader sees the whole file or none
        except OSError:
            pass

    def lookup(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """The cached summaries among ``names``."""
        found = {}
        for name in names:
            entry = self.get(name)
            if entry is not None:
                found[name] = entry["summary"]
        return found
