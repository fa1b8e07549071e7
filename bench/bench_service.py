"""Benchmark of the live service: what one tick of `autoscaler run` costs, and whether it grows.

    nice -n 5 .venv/bin/python bench/bench_service.py [--ticks 1000] [--tick-s 0.25] [--runs 1]
                                                      [--max-minutes 10] [--json FILE] [--keep DIR]

Each run starts, on 127.0.0.1 and free ports only:

- the real SGLang Model Gateway (``smg launch``, no workers: the controller registers them);
- a real Prometheus (Debian's, from PATH) scraping the three workers' ports every second;
- ``autoscaler run`` with policies/demo.yaml, its three worker URLs moved to free ports and
  ``scaling.tick_interval_s`` set to ``--tick-s``, ``--signals prometheus --prometheus URL``, a
  fresh SQLite ledger. Its ``local`` actuator starts the three ``autoscaler emulate worker``
  processes itself as the core asks for them (the floor's group at once);
- light streaming load through the gateway (``--concurrency`` open chat streams) during two
  bursts, so that the fleet scales up and then drains back down to the floor: ticks
  ``--burst`` (default 100-400 and 600-750).

Ticks are counted as the decisions the run recorded in its ledger (one per tick; the file is read
read-only by this script, never through the controller's HTTP server, so counting costs the
controller nothing). It samples the controller process every second from /proc:

- CPU: utime + stime of /proc/PID/stat (all its threads). The wait on Prometheus (and on the
  gateway and workers) is wall time spent blocked in a socket read, which is not CPU time, so the
  CPU per tick already leaves it out. Wall time per tick comes from the controller's own
  ``autoscaler_tick_duration_seconds`` histogram (sum / count), read at the start mark and at the
  end (two scrapes of /metrics in the whole run);
- resident memory (VmRSS of /proc/PID/status), threads (Threads), open file descriptors
  (/proc/PID/fd) and how many of them are sockets (open connections);
- the core's memory as the controller saved it in the ledger (``controller_state`` key
  ``memory``): the lengths of its lists, which must stay bounded.

The start mark is taken once ``--warmup`` ticks (default 20) are recorded, so start-up (imports,
migrations, the first worker's start) is reported apart; the end mark at ``--ticks``. Then the
controller gets SIGTERM (it must exit 0), and every process the run started (the controller's
workers included, found by the pids they report and by their command lines) is killed, also on
Ctrl-C, SIGTERM or an error. A run that has not reached ``--ticks`` within ``--max-minutes`` is
aborted (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoscaler.core.types import merge_memory_dicts  # noqa: E402
from tests.support.live import StreamingLoad, write_policy  # noqa: E402
from tests.support.procs import PYTHON, Proc, free_port, start_gateway, wait_http, wait_until  # noqa: E402
from tests.support.prometheus import write_config  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# ------------------------------------------------------------------------------ /proc readings
@dataclass
class Sample:
    wall_s: float  # since the controller started
    ticks: int
    cpu_s: float
    sys_s: float  # of cpu_s, in the kernel
    rss_mb: float
    threads: int
    fds: int
    sockets: int


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime + stime, stime) of the process in seconds: all its threads; children not included."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK, stime / CLK_TCK


def status_fields(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def fd_counts(pid: int) -> tuple[int, int]:
    """(open file descriptors, of which sockets)."""
    total = sockets = 0
    for entry in os.scandir(f"/proc/{pid}/fd"):
        total += 1
        with contextlib.suppress(OSError):
            if os.readlink(entry.path).startswith("socket:"):
                sockets += 1
    return total, sockets


def sample(pid: int, t0: float, ticks: int) -> Sample:
    st = status_fields(pid)
    fds, sockets = fd_counts(pid)
    return Sample(round(time.monotonic() - t0, 2), ticks, *cpu_seconds(pid), int(st["VmRSS"].split()[0]) / 1024,
                  int(st["Threads"]), fds, sockets)


# ------------------------------------------------------------------------------ the ledger, read-only
class LedgerReader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection | None:
        if self._conn is None and self.path.exists():
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=2)
        return self._conn

    def ticks(self) -> int:
        try:
            db = self._db()
            return db.execute("SELECT count(*) FROM decisions").fetchone()[0] if db else 0
        except sqlite3.Error:  # not migrated yet, or busy for a moment
            return -1

    def actions(self) -> dict[str, int]:
        db = self._db()
        return dict(db.execute("SELECT action, count(*) FROM decisions GROUP BY action").fetchall())

    def starts_and_stops(self) -> dict[str, int]:
        db = self._db()
        return dict(db.execute("SELECT kind, count(*) FROM actions GROUP BY kind").fetchall())

    def memory_sizes(self) -> dict[str, int]:
        """The lengths of the lists (and dicts) in the core's saved memory."""
        db = self._db()
        rows = dict(db.execute("SELECT key, value FROM controller_state WHERE key IN ('memory', 'memory_history')"))
        if "memory" not in rows:
            return {}
        parts = {k: json.loads(v) if isinstance(v, str) else v for k, v in rows.items()}
        value = merge_memory_dicts(parts["memory"], parts.get("memory_history"))
        return {k: len(v) for k, v in value.items() if isinstance(v, (list, dict))}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def scrape(url: str) -> dict[str, float]:
    """The controller's /metrics, summed by metric name (labels dropped)."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=5, trust_env=False).text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        with contextlib.suppress(ValueError):
            out[name] = out.get(name, 0.0) + float(value)
    return out


# ------------------------------------------------------------------------------ cleanup of workers
def worker_pids(ports: list[int]) -> list[int]:
    """Emulated workers on ``ports``, found by their command line (``emulate worker ... --port P``)."""
    wanted = {str(p) for p in ports}
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "emulate" in argv and "worker" in argv and "--port" in argv:
            i = argv.index("--port")
            if i + 1 < len(argv) and argv[i + 1] in wanted:
                pids.append(int(entry.name))
    return pids


def kill_workers(ports: list[int]) -> list[int]:
    """SIGKILL the process group of every emulated worker on ``ports`` (each runs in its own session)."""
    killed = []
    for _ in range(3):  # a worker the controller was starting at that moment shows up a moment later
        pids = worker_pids(ports)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
        if not pids:
            break
        time.sleep(0.3)
    return sorted(set(killed))


# ------------------------------------------------------------------------------ one run
@dataclass
class RunResult:
    ticks: int
    tick_s: float
    warmup_ticks: int
    cpu_ms_per_tick: float
    cpu_ms_per_tick_with_startup: float
    sys_ms_per_tick: float  # the kernel's part of cpu_ms_per_tick
    wall_ms_per_tick: float  # the tick's own wall time (histogram sum / count), Prometheus wait included
    wall_s: float
    startup_cpu_s: float
    rss_mb_start: float
    rss_mb_end: float
    rss_mb_max_after_start: float
    threads_start: int
    threads_end: int
    fds_start: int
    fds_end: int
    sockets_start: int
    sockets_end: int
    memory_sizes_start: dict
    memory_sizes_end: dict
    decisions: dict
    actions: dict
    requests: int
    failed_requests: int
    exit_code: int | None
    samples: list = field(default_factory=list)


def run_once(args: argparse.Namespace, workdir: Path) -> RunResult:
    deadline = time.monotonic() + args.max_minutes * 60
    procs: list[Proc] = []
    ports = [free_port() for _ in range(3)]
    loads: list[StreamingLoad] = []
    reader = None
    try:
        gw = start_gateway(workdir / "logs")
        procs.append(gw.proc)
        prom_port = free_port()
        write_config(workdir / "prometheus.yml", [f"127.0.0.1:{p}" for p in ports], 1.0)
        prom = Proc(["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={workdir / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                    workdir / "logs" / "prometheus.log")
        procs.append(prom)
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_http(prom_url + "/-/ready", 30, proc=prom)

        policy = write_policy(workdir / "policy.yaml", ports=ports, scaling={"tick_interval_s": args.tick_s})
        db = workdir / "ledger.db"
        listen = free_port()
        url = f"http://127.0.0.1:{listen}"
        run_argv = ["run", "--policy", str(policy), "--db", f"sqlite:///{db}", "--signals", "prometheus",
                    "--prometheus", prom_url, "--gateway", gw.url, "--listen", f"127.0.0.1:{listen}"]
        if args.tracemalloc:  # the same service, in a wrapper that compares heap snapshots (slower)
            head = [PYTHON, str(Path(__file__).resolve()), "_traced", str(Path(args.tracemalloc).resolve())]
        else:
            head = [PYTHON, "-m", "autoscaler"]
        controller = Proc(head + run_argv,
                          workdir / "logs" / "controller.log", env={"AUTOSCALER_LOCAL_LOG_DIR": str(workdir / "workers")})
        procs.append(controller)
        t0 = time.monotonic()
        pid = controller.pid
        reader = LedgerReader(db)
        wait_until(lambda: reader.ticks() >= 1, 60, what="the first decision", proc=controller)

        samples: list[Sample] = []
        start: Sample | None = None
        start_metrics: dict[str, float] = {}
        start_memory: dict[str, int] = {}

        def mark(ticks: int) -> tuple[Sample, dict[str, float], dict[str, int]]:
            """A sample, the controller's metrics and the memory's sizes, taken together (the start
            and the end of the measured ticks); a tracemalloc snapshot too when asked for."""
            taken = sample(pid, t0, ticks)
            samples.append(taken)
            result = (taken, scrape(url), reader.memory_sizes())
            if args.tracemalloc:
                os.kill(pid, signal.SIGUSR1)
            return result

        bursts = [tuple(int(x) for x in b.split("-")) for b in args.burst]
        next_sample = time.monotonic()
        spy: Proc | None = None
        while True:
            if not controller.alive():
                raise RuntimeError(f"the controller exited with {controller.popen.returncode}:\n{controller.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not {args.ticks} ticks within {args.max_minutes} minutes "
                                   f"({reader.ticks()} recorded)")
            ticks = reader.ticks()
            if ticks < 0:
                time.sleep(0.05)
                continue
            if start is None and ticks >= args.warmup:
                start, start_metrics, start_memory = mark(ticks)
                if args.py_spy:
                    spy = Proc([args.py_spy_bin, "record", "--pid", str(pid), "--rate", "200", "--gil", "--nonblocking",
                                "--format", "raw",
                                "--output", str(Path(args.py_spy).resolve())], workdir / "logs" / "py-spy.log")
                    procs.insert(0, spy)
            for i, (b0, b1) in enumerate(bursts):
                if len(loads) == i and ticks >= b0:
                    loads.append(StreamingLoad(gw.url, concurrency=args.concurrency, max_tokens=30,
                                               max_seconds=(b1 - b0) * args.tick_s * 3, sessions=24).__enter__())
                if len(loads) == i + 1 and ticks >= b1 and not loads[i]._stop.is_set():
                    loads[i]._stop.set()  # let the open streams finish; joined at the end
            if ticks >= args.ticks:
                end, end_metrics, end_memory = mark(ticks)
                if args.tracemalloc:
                    wait_until(lambda: Path(args.tracemalloc).exists(), 60, what="the tracemalloc report")
                if spy is not None:
                    spy.signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                    with contextlib.suppress(Exception):
                        spy.wait(30)
                break
            if start is not None and time.monotonic() >= next_sample:
                samples.append(sample(pid, t0, ticks))
                next_sample = time.monotonic() + args.sample_s
            time.sleep(0.05)

        controller.terminate()
        exit_code = controller.wait(30)
        results = [r for load in loads for r in load.stop()]
        decisions, actions = reader.actions(), reader.starts_and_stops()
        dt = end.ticks - start.ticks
        d_count = end_metrics["autoscaler_tick_duration_seconds_count"] - start_metrics["autoscaler_tick_duration_seconds_count"]
        d_sum = end_metrics["autoscaler_tick_duration_seconds_sum"] - start_metrics["autoscaler_tick_duration_seconds_sum"]
        after_start = [s.rss_mb for s in samples]
        return RunResult(
            ticks=end.ticks, tick_s=args.tick_s, warmup_ticks=start.ticks,
            cpu_ms_per_tick=round(1000 * (end.cpu_s - start.cpu_s) / dt, 2),
            cpu_ms_per_tick_with_startup=round(1000 * end.cpu_s / end.ticks, 2),
            sys_ms_per_tick=round(1000 * (end.sys_s - start.sys_s) / dt, 2),
            wall_ms_per_tick=round(1000 * d_sum / d_count, 2) if d_count else float("nan"),
            wall_s=round(end.wall_s, 1), startup_cpu_s=round(start.cpu_s, 2),
            rss_mb_start=round(start.rss_mb, 1), rss_mb_end=round(end.rss_mb, 1),
            rss_mb_max_after_start=round(max(after_start), 1),
            threads_start=start.threads, threads_end=end.threads, fds_start=start.fds, fds_end=end.fds,
            sockets_start=start.sockets, sockets_end=end.sockets,
            memory_sizes_start=start_memory, memory_sizes_end=end_memory, decisions=decisions, actions=actions,
            requests=len(results), failed_requests=len(StreamingLoad.failures(results)), exit_code=exit_code,
            samples=[asdict(s) for s in samples],
        )
    finally:
        for load in loads:
            load._stop.set()
        for proc in reversed(procs):  # the controller first, so it starts no worker while we clean up
            proc.kill()
        kill_workers(ports)
        if reader is not None:
            reader.close()


def flatness(samples: list[dict], every: int = 100) -> list[dict]:
    """One sample per ``every`` ticks (the first at or after each multiple)."""
    out, want = [], 0
    for s in samples:
        if s["ticks"] >= want:
            out.append(s)
            want = (s["ticks"] // every + 1) * every
    return out


def traced(out: str, run_argv: list[str]) -> int:
    """``autoscaler run`` in this process under tracemalloc: the first SIGUSR1 takes a snapshot,
    the second writes the 40 lines whose allocations grew most since then (and the totals) to ``out``."""
    import threading
    import tracemalloc

    from autoscaler.cli import main as cli

    tracemalloc.start(12)
    snaps: list = []

    def write_report() -> None:
        first, last = snaps
        lines = [f"traced heap: {sum(s.size for s in first.statistics('filename')) / 1e6:.2f} MB at the start mark, "
                 f"{sum(s.size for s in last.statistics('filename')) / 1e6:.2f} MB at the end", ""]
        for stat in last.compare_to(first, "traceback")[:40]:
            lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  (now {stat.size / 1024:.1f} KiB)")
            lines += ["        " + line for line in stat.traceback.format()[-8:]]
        Path(out + ".part").write_text("\n".join(lines) + "\n")
        os.replace(out + ".part", out)

    def on_usr1(_signum, _frame) -> None:
        snaps.append(tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]))
        if len(snaps) == 2:
            threading.Thread(target=write_report, daemon=True).start()

    signal.signal(signal.SIGUSR1, on_usr1)
    return cli(run_argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_traced"]:
        return traced(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--tick-s", type=float, default=0.25, help="scaling.tick_interval_s (default 0.25)")
    parser.add_argument("--warmup", type=int, default=20, help="ticks before the start mark (default 20)")
    parser.add_argument("--runs", type=int, default=1, help="repeat and report medians (default 1)")
    parser.add_argument("--burst", action="append", metavar="T0-T1",
                        help="a load burst from tick T0 to T1 (repeatable; default 100-400 and 600-750)")
    parser.add_argument("--concurrency", type=int, default=10, help="open streams during a burst (default 10)")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between /proc samples (default 1)")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="abort a run after this long (default 10)")
    parser.add_argument("--json", metavar="FILE", help="write every run's result (with its samples) here")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs' logs, policy and ledger under DIR")
    parser.add_argument("--py-spy", metavar="FILE", help="profile the controller with py-spy from the start mark to "
                        "the end (collapsed stacks of on-CPU threads to FILE; py-spy's pauses make the numbers worse)")
    parser.add_argument("--py-spy-bin", default="py-spy", help="the py-spy program (default: py-spy on PATH)")
    parser.add_argument("--tracemalloc", metavar="FILE", help="run the controller under tracemalloc and write the "
                        "heap growth between the start and end marks, by line, to FILE (slower: a diagnostic run)")
    args = parser.parse_args(argv)
    if args.runs > 1 and (args.py_spy or args.tracemalloc):
        parser.error("--py-spy and --tracemalloc profile one run: use --runs 1")
    args.burst = args.burst or ["100-400", "600-750"]

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    results: list[RunResult] = []
    for i in range(args.runs):
        if args.keep:
            workdir = Path(args.keep) / f"run-{i + 1}"
            workdir.mkdir(parents=True, exist_ok=True)
            results.append(run_once(args, workdir))
        else:
            with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
                results.append(run_once(args, Path(tmp)))
        r = results[-1]
        print(f"run {i + 1}: {r.ticks} ticks in {r.wall_s} s; CPU {r.cpu_ms_per_tick} ms/tick "
              f"(of it {r.sys_ms_per_tick} in the kernel; {r.cpu_ms_per_tick_with_startup} with start-up); wall {r.wall_ms_per_tick} ms/tick; "
              f"RSS {r.rss_mb_start} -> {r.rss_mb_end} MB (max {r.rss_mb_max_after_start}); threads "
              f"{r.threads_start} -> {r.threads_end}; fds {r.fds_start} -> {r.fds_end} (sockets {r.sockets_start} -> "
              f"{r.sockets_end}); decisions {r.decisions}; actions {r.actions}; requests {r.requests} "
              f"({r.failed_requests} failed); exit {r.exit_code}", flush=True)
        for s in flatness(r.samples):
            print(f"    tick {s['ticks']:5d}  t {s['wall_s']:6.1f} s  cpu {s['cpu_s']:6.2f} s  rss {s['rss_mb']:6.1f} MB"
                  f"  threads {s['threads']:3d}  fds {s['fds']:3d}  sockets {s['sockets']:3d}")
        print(f"    core memory sizes: start {r.memory_sizes_start}, end {r.memory_sizes_end}")

    def med(key: str) -> float:
        return round(statistics.median(getattr(r, key) for r in results), 2)

    print(f"\nmedians of {len(results)} run(s) of {args.ticks} ticks at {args.tick_s:g} s:")
    for key in ("cpu_ms_per_tick", "sys_ms_per_tick", "cpu_ms_per_tick_with_startup", "wall_ms_per_tick", "startup_cpu_s",
                "rss_mb_start", "rss_mb_end", "rss_mb_max_after_start", "threads_start", "threads_end",
                "fds_start", "fds_end", "sockets_start", "sockets_end"):
        print(f"  {key:30s} {med(key)}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    ok = all(r.exit_code == 0 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
