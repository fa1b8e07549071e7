"""Synthetic stress traces: the three shapes of traffic issue 11 says the default policy failed on,
built from the request sizes of a real trace, to check the core against shapes the five shared
traces do not have. They are checks, not tuning data: the defaults were chosen on the shared
traces alone (README, "How the defaults were chosen").

    .venv/bin/python bench/stress_traces.py --out out/stress [--sizes TRACE.csv] [--seed 0]
    nice -n 10 .venv/bin/python bench/cv_matrix.py --traces out/stress --cache out/stress-references.json

Writes one folder per shape, each holding ``trace.csv`` (the ``csv`` trace format: relative
``timestamp_s,input_tokens,output_tokens,session_id``):

- ``daily-swing``: one day, a business-hours cycle with a 10x swing (night 1x; ramps of two hours,
  07:00-09:00 up and 17:00-19:00 down; day 10x), with 15% noise per 10 minutes. One day: no earlier
  day to learn the cycle from.
- ``on-off``: two days of bursts: "on" stretches of 10-60 minutes at the full rate, "off" stretches
  of 20-120 minutes at 5% of it, each edge within a minute.
- ``regime-shift``: 14 days of regimes of 1-4 days at levels 0.25, 0.5 or 1.0 (no two alike in a
  row), with a weak daily cycle (+-20%).

Arrivals are Poisson at the shape's rate (peak ``--peak-rate`` per second, enough that every
peak use from 0.35 to 0.7 thins rather than compresses); sizes are drawn with replacement from the
``--sizes`` trace (Azure conversation by default: ContextTokens, GeneratedTokens); 60% of requests
continue one of the last 200 conversations (a session key, so drains move sessions like a
``cache_aware`` gateway does), the rest start a new one.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

DAY_S = 86400


def daily_swing(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    h = (t % DAY_S) / 3600.0
    up = np.clip((h - 7.0) / 2.0, 0.0, 1.0)
    down = np.clip((h - 17.0) / 2.0, 0.0, 1.0)
    level = 1.0 + 9.0 * (up - down)
    noise = rng.lognormal(0.0, 0.15, size=int(t[-1] // 600) + 1)[(t // 600).astype(int)]
    return level * noise / 10.0


def on_off(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    level = np.empty_like(t)
    edge, on = 0.0, False
    while edge < t[-1] + 1:
        length = rng.uniform(600, 3600) if on else rng.uniform(1200, 7200)
        level[(t >= edge) & (t < edge + length)] = 1.0 if on else 0.05
        edge += length
        on = not on
    return level


def regime_shift(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    level = np.empty_like(t)
    edge, prev = 0.0, None
    while edge < t[-1] + 1:
        length = rng.uniform(1, 4) * DAY_S
        value = rng.choice([v for v in (0.25, 0.5, 1.0) if v != prev])
        level[(t >= edge) & (t < edge + length)] = value
        edge, prev = edge + length, value
    daily = 1.0 + 0.2 * np.sin(2 * np.pi * ((t % DAY_S) / DAY_S - 0.25))
    return level * daily / 1.2


SHAPES = {"daily-swing": (1 * DAY_S, daily_swing), "on-off": (2 * DAY_S, on_off),
          "regime-shift": (14 * DAY_S, regime_shift)}


def arrivals(duration_s: float, shape, peak_rate: float, rng: np.random.Generator) -> np.ndarray:
    """A Poisson process of rate peak_rate x shape(t), by thinning one at the peak rate."""
    n = rng.poisson(peak_rate * duration_s)
    t = np.sort(rng.uniform(0.0, duration_s, size=n))
    keep = rng.random(n) < np.clip(shape(t, rng), 0.0, 1.0)
    return t[keep]


def read_sizes(path: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return (np.array([int(r["ContextTokens"]) for r in rows]), np.array([int(r["GeneratedTokens"]) for r in rows]))


def sessions(n: int, rng: np.random.Generator, recent: int = 200, continue_p: float = 0.6) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    opened: list[int] = []
    cont = rng.random(n) < continue_p
    pick = rng.integers(0, recent, size=n)
    for i in range(n):
        if cont[i] and opened:
            out[i] = opened[-1 - pick[i] % min(recent, len(opened))]
        else:
            opened.append(len(opened))
            out[i] = opened[-1]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out/stress")
    ap.add_argument("--sizes", default="/work/shared/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--peak-rate", type=float, default=2.0, help="arrivals per second at the shape's peak")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ins, outs = read_sizes(args.sizes)
    for k, (name, (duration, shape)) in enumerate(SHAPES.items()):
        rng = np.random.default_rng([args.seed, k])
        t = arrivals(duration, shape, args.peak_rate, rng)
        idx = rng.integers(0, len(ins), size=len(t))
        sess = sessions(len(t), rng)
        folder = Path(args.out) / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "trace.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["timestamp_s", "input_tokens", "output_tokens", "session_id"])
            w.writerows(zip(np.round(t, 3).tolist(), ins[idx].tolist(), outs[idx].tolist(), sess.tolist()))
        print(f"{folder / 'trace.csv'}: {len(t):,} requests over {duration / 3600:.0f} h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
