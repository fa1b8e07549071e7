"""Benchmark of the backtest: the whole `autoscaler simulate --compare` pipeline, as a user runs it.

    .venv/bin/python bench/bench_backtest.py [--runs 3] [--traces servegen,azure,mooncake]
                                             [--baseline REV] [--candidate REV] [--json FILE]

For each trace, N times (default 3): `python -m autoscaler simulate --policy policies/default.yaml
--trace T --compare --json` (8 replays: ours, always-on, HPA at 5 targets, the oracle) and the same
without --compare (ours alone), each in a fresh process. Prints a Markdown table of medians:

- wall s: the command's wall time, start-up, trace loading and scaling included;
- simulated requests/s: requests x replays / wall (ours alone: requests / wall);
- peak memory: the largest ru_maxrss of the command's processes (os.wait4's rusage of the command
  covers it and the workers it waited for), and the highest sum of PSS over the command's process
  tree, sampled every 50 ms (PSS splits pages the forked workers share with their parent, so the
  sum is the memory the backtest really holds).

The machine may be shared and noisy: medians only, and with ``--baseline REV`` (e.g. the commit
before a change) that revision's package is extracted with `git archive` and run the same way,
alternating with the working tree's (or ``--candidate REV``'s), so the speed-up is a ratio measured
under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "policies/default.yaml"
TRACES = {
    "servegen": ("ServeGen M small (14 d)", ROOT / "examples/traces/servegen-m-small"),
    "azure": ("Azure 2023 conv (1 h)", ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"),
    "mooncake": ("Mooncake FAST'25 conv (1 h)",
                 ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl"),
}
REPLAYS_WITH_COMPARE = 8  # ours, always-on, HPA at 0.5-0.9, the oracle


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (ppid in field 4 of /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _PssSampler(threading.Thread):
    """The highest sum of PSS over a process tree, sampled every 50 ms until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.stopped = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(p) for p in _tree(self.pid)))
            self.stopped.wait(0.05)


def run_once(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Run ``cmd``; -> wall s, its JSON output, the largest maxrss (MB) and the peak PSS sum (MB)."""
    with tempfile.TemporaryFile() as errf:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errf)
        sampler = _PssSampler(proc.pid)
        sampler.start()
        # Read stdout to its end (a full pipe would block the child), then reap with wait4 for the
        # rusage of this command alone (RUSAGE_CHILDREN would mix every run of the benchmark).
        out = proc.stdout.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()  # type: ignore[union-attr]
        sampler.stopped.set()
        sampler.join()
        if proc.returncode != 0:
            errf.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{errf.read().decode()}")
    return {"wall_s": wall, "out": json.loads(out), "maxrss_mb": usage.ru_maxrss / 1024,
            "pss_peak_mb": sampler.peak_kb / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}


def _extract(rev: str, into: Path) -> Path:
    """``git archive REV autoscaler`` extracted under ``into``; -> the directory to run it from."""
    archive = subprocess.run(["git", "archive", rev, "autoscaler"], cwd=ROOT, check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per command (default 3); medians are reported")
    ap.add_argument("--traces", default="servegen,azure,mooncake", help=f"comma-separated, of {', '.join(TRACES)}")
    ap.add_argument("--baseline", metavar="REV", help="also run this git revision's package, alternating")
    ap.add_argument("--candidate", metavar="REV", help="measure this git revision's package instead of the "
                    "working tree (others' uncommitted edits left out)")
    ap.add_argument("--no-alone", action="store_true", help="skip the runs of ours alone (without --compare)")
    ap.add_argument("--json", metavar="FILE", help="write every measurement here")
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    tmp = tempfile.TemporaryDirectory(prefix="bench-backtest-")
    variants = {"now": (ROOT, env)}
    # With `python -m`, the working directory comes first on sys.path: run an extracted revision
    # from its tree so that its package is the one imported (PYTHONPATH too, for the workers).
    if args.candidate:
        cand = _extract(args.candidate, Path(tmp.name) / "candidate")
        variants["now"] = (cand, {**env, "PYTHONPATH": str(cand)})
    if args.baseline:
        base = _extract(args.baseline, Path(tmp.name) / "baseline")
        variants["baseline"] = (base, {**env, "PYTHONPATH": str(base)})

    results: list[dict] = []
    for key in args.traces.split(","):
        label, path = TRACES[key]
        commands = {"compare": ["--compare"]} if args.no_alone else {"compare": ["--compare"], "alone": []}
        for mode, extra in commands.items():
            cmd = [sys.executable, "-m", "autoscaler", "simulate", "--policy", str(POLICY), "--trace", str(path),
                   "--json", *extra]
            runs: dict[str, list[dict]] = {v: [] for v in variants}
            for _ in range(args.runs):
                for variant, (cwd, venv) in variants.items():  # alternate: same load for both
                    runs[variant].append(run_once(cmd, cwd, venv))
            row = {"trace": label, "mode": mode, "command": " ".join(["autoscaler", *cmd[3:]]).replace(str(ROOT) + "/", "")}
            for variant, rs in runs.items():
                summaries = [_strip_wall(r["out"]) for r in rs]
                if any(s != summaries[0] for s in summaries):
                    raise SystemExit(f"{label} {mode} {variant}: runs disagree")
                row[variant] = {
                    "wall_s": [round(r["wall_s"], 3) for r in rs],
                    "cpu_s": [round(r["cpu_s"], 3) for r in rs],
                    "maxrss_mb": [round(r["maxrss_mb"], 1) for r in rs],
                    "pss_peak_mb": [round(r["pss_peak_mb"], 1) for r in rs],
                    "requests": rs[0]["out"]["requests"],
                }
            if "baseline" in runs:
                row["same_results"] = _strip_wall(runs["now"][0]["out"]) == _strip_wall(runs["baseline"][0]["out"])
            results.append(row)
            print(f"{label} {mode}: " + "; ".join(f"{v} {statistics.median(row[v]['wall_s']):.2f} s" for v in runs),
                  file=sys.stderr, flush=True)

    print(_table(results, args))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    tmp.cleanup()
    return 0


def _strip_wall(o):
    if isinstance(o, dict):
        return {k: _strip_wall(v) for k, v in o.items() if k != "wall_s"}
    if isinstance(o, list):
        return [_strip_wall(v) for v in o]
    return o


def _table(results: list[dict], args) -> str:
    med = statistics.median
    base = bool(args.baseline)
    head = ["trace", "replays", "requests", f"wall s{' at ' + args.candidate if args.candidate else ''}"]
    if base:
        head += [f"wall s at {args.baseline}", "speed-up", "same results"]
    head += ["simulated requests/s", "CPU s", "peak RSS MB (largest process)", "peak PSS MB (all processes)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        now = r["now"]
        replays = REPLAYS_WITH_COMPARE if r["mode"] == "compare" else 1
        wall = med(now["wall_s"])
        cells = [r["trace"], f"{replays} ({'--compare' if replays > 1 else 'ours alone'})", f"{now['requests']:,}",
                 f"{wall:.2f}"]
        if base:
            bw = med(r["baseline"]["wall_s"])
            cells += [f"{bw:.2f}", f"x{bw / wall:.2f}", "yes" if r["same_results"] else "NO"]
        cells += [f"{now['requests'] * replays / wall:,.0f}", f"{med(now['cpu_s']):.1f}",
                  f"{max(now['maxrss_mb']):.0f}", f"{max(now['pss_peak_mb']):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Medians of {args.runs} run(s); peak memory is the highest of the runs. CPU s: user + system of the "
                 "command and its workers.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
