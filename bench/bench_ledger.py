#!/usr/bin/env python3
"""The ledger's bulk insert: a 14-day backtest's hand-over (80,640 decisions of 15 s ticks, 102
node intervals, 48 events; tests/support/ledger_runs.backtest_schedule) into a fresh SQLite file
and a fresh PostgreSQL database, N times, median and range of ``Ledger.record_bulk``.

    .venv/bin/python bench/bench_ledger.py --runs 5
    .venv/bin/python bench/bench_ledger.py --runs 5 --baseline REV   # also REV's code, alternating

With ``--baseline`` the same measurement runs in a git worktree of REV, alternating with the
current code run by run, so both see the same load of a shared machine. PostgreSQL is a
throwaway server (tests/support/postgres.py: PostgreSQL 15's binaries).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE = r"""
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import backtest_schedule, default_policy
url = sys.argv[2] if sys.argv[2] != "sqlite" else f"sqlite:///{tempfile.mkdtemp()}/bench.db"
s = backtest_schedule()
with Ledger(url) as ledger:
    run = ledger.start_run("simulation", default_policy(), at=s.start, label="bench")
    t = time.perf_counter()
    ledger.record_bulk(run, decisions=s.decisions, events=s.events, intervals=s.intervals)
    print(json.dumps({"s": time.perf_counter() - t, "decisions": len(s.decisions)}))
"""


def once(code_root: Path, url: str) -> float:
    p = subprocess.run([sys.executable, "-c", ONE, str(code_root), url], capture_output=True, text=True,
                       cwd=code_root, timeout=600)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])["s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per database and code version (default 5)")
    ap.add_argument("--baseline", metavar="REV", help="also measure this git revision, alternating")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.support.postgres import start_server, stop_server

    codes = {"current": ROOT}
    worktree = None
    if args.baseline:
        worktree = Path(tempfile.mkdtemp()) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        codes = {f"baseline {args.baseline}": worktree, "current": ROOT}
    server = start_server()
    try:
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for db in ("sqlite", "postgresql"):
                for name, root in codes.items():
                    url = "sqlite" if db == "sqlite" else server.new_database()
                    results.setdefault((name, db), []).append(once(root, url))
        for (name, db), times in results.items():
            print(f"{name:>22} {db:<10} median {statistics.median(times):.2f} s "
                  f"(min {min(times):.2f}, max {max(times):.2f}, {len(times)} runs)")
    finally:
        stop_server(server)
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
