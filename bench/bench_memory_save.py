"""Benchmark: what saving the core memory costs a tick once the memory holds a week.

    nice -n 5 .venv/bin/python bench/bench_memory_save.py [--days 8] [--ticks 400] [--json FILE]

``bench_service.py`` runs minutes, so the memory it saves stays small. After a week a live
controller's memory holds every 5-minute slot of 8 days and 162 hours of the week's rises: about
180 KB of JSON. This replays ``--days`` of the 14-day ServeGen trace under the shipped policy (as
the backtest does) to get that memory, then saves it ``--ticks`` times into a fresh SQLite ledger
two ways, alternating in blocks of 20 ticks:

- ``whole``: ``Memory.to_dict()`` into one row at every tick (the code before 2026-12-03);
- ``split``: ``Memory.recent_dict()`` at every tick and ``history_dict()`` once in 20 ticks
  (a slot ends every 5 minutes: every 20 ticks at the default 15 s; an hour of rises closes once
  an hour), as ``Controller._save_memory`` does.

It prints the CPU per tick (process time, median of the blocks) of each, their ratio, and the
bytes written per tick.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.ledger.live import LiveLedger  # noqa: E402
from autoscaler.ledger.store import Ledger  # noqa: E402
from autoscaler.policy import load_policy  # noqa: E402
from autoscaler.sim.backtest import backtest, prepare_trace  # noqa: E402


def week_memory(days: float):
    policy = load_policy(ROOT / "policies/default.yaml").policy
    trace, factor, _ = prepare_trace(str(ROOT / "examples/traces/servegen-m-small"), "auto", policy, 0.5, 0)
    end = trace.span_s[0] + days * 86400
    part = trace.select(trace.t_s < end)
    part.span_s = (trace.span_s[0], min(end, trace.span_s[1]))
    run = backtest(part, factor, policy, compare=False, seed=0, workers=1)["ours"]
    return run.controller.memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=8.0, help="days of the trace to replay (default 8)")
    parser.add_argument("--ticks", type=int, default=400, help="saves of each way (default 400)")
    parser.add_argument("--json", metavar="FILE", help="write the numbers as JSON")
    args = parser.parse_args()
    t0 = time.monotonic()
    memory = week_memory(args.days)
    whole_bytes = len(json.dumps(memory.to_dict()))
    recent, history = memory.to_dicts()
    recent_bytes, history_bytes = len(json.dumps(recent)), len(json.dumps(history))
    print(f"memory after {args.days:g} days ({time.monotonic() - t0:.0f} s to replay): {len(memory.demand_by_slot)} "
          f"slots, {len(memory.rise_tail)} hours of the tail; {whole_bytes:,} bytes whole, {recent_bytes:,} recent "
          f"+ {history_bytes:,} history")
    block = 20
    per: dict[str, list[float]] = {"whole": [], "split": []}
    with tempfile.TemporaryDirectory() as d:
        ledger = Ledger(f"sqlite:///{d}/l.db")
        live = LiveLedger(ledger)
        try:
            for _ in range(max(1, args.ticks // block)):
                for way in ("whole", "split"):
                    started = time.process_time()
                    for i in range(block):
                        if way == "whole":
                            live.save_state("memory", memory.to_dict(), epoch=1)
                        else:
                            if i == 0:
                                live.save_state("memory_history", memory.history_dict(), epoch=1)
                            live.save_state("memory", memory.recent_dict(), epoch=1)
                    per[way].append((time.process_time() - started) / block * 1000)
        finally:
            ledger.close()
    whole, split = statistics.median(per["whole"]), statistics.median(per["split"])
    out = {"days": args.days, "ticks": args.ticks, "whole_ms_per_tick": round(whole, 3),
           "split_ms_per_tick": round(split, 3), "ratio": round(split / whole, 3), "whole_bytes": whole_bytes,
           "split_bytes_per_tick": round(recent_bytes + history_bytes / block)}
    print(f"CPU per tick, median of {len(per['whole'])} blocks of {block}: whole {whole:.2f} ms, split {split:.2f} ms "
          f"(ratio {split / whole:.3f}); bytes written per tick {whole_bytes:,} against {out['split_bytes_per_tick']:,}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
