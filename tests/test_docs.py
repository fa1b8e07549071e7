"""Docs that cannot rot (issue 21): every ``console`` block of README.md and docs/*.md runs here, one
test per block (id ``FILE:LINE``), and its output must keep the shape shown. The conventions (loose
matching of numbers, ``...``, ``[exit N]``, the fixtures a block may name) are in docs/README.md;
this module implements them. Each block runs in its own temporary folder (links to the repository's
folders, so repository paths resolve) in one ``bash`` started in a session of its own, killed by its
process group when the block ends, also when the test fails. Fixtures (an emulated fleet behind the
real gateway, a recorded ledger) are started for the blocks that name them, on free ports, and stopped
by their PIDs."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import REPO, free_port, start_gateway, start_worker

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
EXIT = re.compile(r"^\[exit (\d+)\]$")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
BLOCK_TIMEOUT_S = 120
FIXTURES = ("backtest", "backtest14", "story", "controls", "worker", "fleet", "prometheus", "history")
AZURE = "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"


@dataclass
class Command:
    text: str
    expected: list[str]
    exit_code: int = 0


@dataclass
class Block:
    path: Path
    line: int
    info: str
    body: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def fixture(self) -> str | None:
        words = self.info.split()
        return words[1] if len(words) > 1 else None


def blocks(paths: list[Path] = DOCS) -> list[Block]:
    found = []
    for path in paths:
        text = path.read_text()
        for m in FENCE.finditer(text):
            found.append(Block(path, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), m.group(2)))
    return found


def parse_console(block: Block) -> list[Command]:
    """The commands of a console block: ``$ `` lines (continued by a trailing `` \\``), each with the
    output lines that follow it; a last output line ``[exit N]`` is the exit code."""
    commands: list[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if not commands:
                raise ValueError(f"{block.id}: output before the first '$ ' command: {line!r}")
            commands[-1].expected.append(line)
            i += 1
            continue
        text = line[2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        commands.append(Command(text, []))
        i += 1
    if not commands:
        raise ValueError(f"{block.id}: a console block without a '$ ' command")
    for c in commands:
        while c.expected and not c.expected[-1].strip():
            c.expected.pop()
        if c.expected and (m := EXIT.match(c.expected[-1].strip())):
            c.exit_code = int(m.group(1))
            c.expected.pop()
    return commands


def normalise(line: str) -> str:
    line = HEX.sub("H", line)
    return " ".join(NUMBER.sub("N", line).split())


def line_matches(expected: str, got: str) -> bool:
    """One line: equal once normalised, where ``...`` within the expected line stands for any text."""
    e, g = normalise(expected), normalise(got)
    if "..." not in e:
        return e == g
    return re.fullmatch(".*".join(re.escape(part.strip()) for part in e.split("...")), g) is not None


def output_matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` against ``got`` line by line; a line ``...`` stands for any number of lines."""
    exp = [normalise(x) for x in expected]

    @functools.cache
    def at(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(got)
        if exp[i] == "...":
            return at(i + 1, j) or (j < len(got) and at(i, j + 1))
        return j < len(got) and line_matches(expected[i], got[j]) and at(i + 1, j + 1)

    return at(0, 0)


CONSOLE = [b for b in blocks() if b.info.split()[:1] == ["console"]]
MARK = "@@docs-test-exit"


def run_block(block: Block, folder: Path, env: dict[str, str]) -> list[tuple[Command, list[str], int]]:
    """Runs the block's commands in order in one bash; returns each command with its output lines
    (stdout and stderr together) and its exit code."""
    commands = parse_console(block)
    script = "".join(f"{c.text}\nprintf '\\n{MARK} %s\\n' \"$?\"\n" for c in commands)
    (folder / ".docs-test.sh").write_text(script)
    # Output to a file, not a pipe: a process the block leaves in the background (a worker started
    # with '&') keeps its copy of stdout open, and the block is over when its bash exits.
    with open(folder / ".docs-test.out", "w") as out_file:
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", ".docs-test.sh"], cwd=folder, env=env,
                                stdin=subprocess.DEVNULL, stdout=out_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    timed_out = False
    try:
        proc.wait(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # The block's bash and whatever it left in the background, by its process group.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        proc.wait()
    out = (folder / ".docs-test.out").read_text(errors="replace")
    if timed_out:
        pytest.fail(f"{block.id}: the block did not finish within {BLOCK_TIMEOUT_S} s; its output:\n{out}")
    results = []
    chunk: list[str] = []
    codes = iter(commands)
    for line in out.splitlines():
        if line.startswith(MARK):
            if chunk and not chunk[-1].strip():
                chunk.pop()  # the marker's own leading newline
            while chunk and not chunk[-1].strip():
                chunk.pop()
            results.append((next(codes), chunk, int(line.split()[1])))
            chunk = []
        else:
            chunk.append(line)
    assert len(results) == len(commands), f"{block.id}: the block stopped after {len(results)} of " \
        f"{len(commands)} commands; its output:\n" + "\n".join(chunk)
    return results


def workdir(folder: Path) -> Path:
    folder.mkdir()
    for entry in REPO.iterdir():
        # out/ is where the blocks write (a developer's own out/, from scripts/backtest.sh or the
        # matrix, is not theirs to see or overwrite)
        if entry.name not in (".git", "out"):
            (folder / entry.name).symlink_to(entry)
    return folder


def base_env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PORT"] = str(free_port())
    env.pop("AUTOSCALER_DATABASE_URL", None)
    for name in ("COLUMNS", "LINES"):  # no terminal: help text wraps at 80 columns, as shown
        env.pop(name, None)
    return env


def shared(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A file built once for the whole session, also across pytest-xdist's processes (they share the
    parent of their base temporary folders): the first builds it under a lock, the others wait."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-of-USER/pytest-N/popen-gwK: the session's folder, shared by its workers
    target = root / f"docs-test-{name}"
    with open(root / f"docs-test-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            partial = root / f"docs-test-{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            build(partial)
            partial.rename(target)
    return target


def simulate_into(db: Path, trace: str) -> None:
    p = subprocess.run([sys.executable, "-m", "autoscaler", "simulate", "--policy", "policies/default.yaml",
                        "--trace", trace, "--db", f"sqlite:///{db}"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr


FixtureFn = Callable[[Path], dict[str, str]]


def backtest14(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared(tmp_path_factory, "backtest14",
                  lambda d: simulate_into(d / "backtest.db", "examples/traces/servegen-m-small"))


@pytest.fixture
def docs_backtest(tmp_path_factory: pytest.TempPathFactory) -> FixtureFn:
    """``backtest.db``: the one-hour Azure trace backtested under the default policy (as the README's
    'write and backtest a policy' command records it)."""
    built = shared(tmp_path_factory, "backtest", lambda d: simulate_into(d / "backtest.db", AZURE))

    def place(folder: Path) -> dict[str, str]:
        shutil.copy(built / "backtest.db", folder / "backtest.db")
        return {}
    return place


@pytest.fixture
def docs_backtest14(tmp_path_factory: pytest.TempPathFactory) -> FixtureFn:
    """``out/backtest.db``: the 14-day ServeGen backtest of the default policy, as
    ``scripts/backtest.sh`` records it (without the references, which the ledger does not keep)."""
    built = backtest14(tmp_path_factory)

    def place(folder: Path) -> dict[str, str]:
        (folder / "out").mkdir()
        shutil.copy(built / "backtest.db", folder / "out" / "backtest.db")
        return {}
    return place


@pytest.fixture
def docs_story(tmp_path_factory: pytest.TempPathFactory) -> FixtureFn:
    """``autoscaler.db`` (the default ledger): run 1 the 14-day backtest (source simulation), run 2
    the ledger tests' 48-hour live story labelled "prod" (tests/support/ledger_runs.py)."""
    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import record_live

    def build(d: Path) -> None:
        shutil.copy(backtest14(tmp_path_factory) / "backtest.db", d / "autoscaler.db")
        with Ledger(f"sqlite:///{d / 'autoscaler.db'}") as ledger:
            record_live(ledger, label="prod")

    built = shared(tmp_path_factory, "story", build)

    def place(folder: Path) -> dict[str, str]:
        shutil.copy(built / "autoscaler.db", folder / "autoscaler.db")
        return {}
    return place


@pytest.fixture
def docs_controls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureFn]:
    """``fleet.db``, a ledger as a controller on SQLite leaves it (a live run, its fleet g1-g3, a
    leader's lease row, the policy it loaded), with ``AUTOSCALER_DATABASE_URL`` pointing at it; and
    ``why.db``, the 48-hour story with an operator pin and a cordon (tests/test_controls.py's)."""
    from sqlalchemy import insert

    from autoscaler.ledger.models import ControllerStateRow
    from autoscaler.ledger.store import Ledger
    from autoscaler.service.leadership import SqliteFlock
    from tests.support.ledger_runs import T0, H, record_live
    from tests.test_controls import _controller_ledger, _rec

    def build(d: Path) -> None:
        url = f"sqlite:///{d / 'fleet.db'}"
        _controller_ledger(url)
        with Ledger(url) as ledger, ledger.engine.begin() as conn:
            conn.execute(insert(ControllerStateRow).values(
                key="policy", epoch=1, updated_at=T0,
                value={"path": "policies/prod.yaml", "hash": "3f9c2a51d0e4" * 5 + "3f9c", "error": None,
                       "loaded_at": "2026-12-01T07:00:02Z"}))
        with Ledger(f"sqlite:///{d / 'why.db'}") as ledger:
            record_live(ledger)
            _rec(ledger, "pin", T0 + 2 * H, groups=2, until=T0 + 4 * H, by="alice", reason="launch day")
            _rec(ledger, "cordon", T0 + 2 * H, group="g2", by="dave", reason="disk swap")
            _rec(ledger, "uncordon", T0 + 5 * H, group="g2", by="dave", reason="swapped")

    built = shared(tmp_path_factory, "controls", build)
    locks = []

    def place(folder: Path) -> dict[str, str]:
        for name in ("fleet.db", "why.db"):
            shutil.copy(built / name, folder / name)
        lock = SqliteFlock(f"sqlite:///{folder / 'fleet.db'}", "ctl-1")  # the running controller's flock
        lock.acquire()
        locks.append(lock)
        return {"AUTOSCALER_DATABASE_URL": "sqlite:///fleet.db"}
    yield place
    for lock in locks:
        lock.release()


def start_workers(log_dir: Path, count: int, **options: object) -> list:
    """``count`` emulated workers g1.. started side by side (each waits for its own readiness)."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda i: start_worker(log_dir, name=f"g{i}", **options), range(1, count + 1)))


@pytest.fixture
def docs_worker(tmp_path: Path) -> Iterator[FixtureFn]:
    """One emulated worker, ready, at 20 decode tokens/s, on ``$PORT``."""
    started = []

    def place(folder: Path) -> dict[str, str]:
        w = start_worker(tmp_path, decode_tokens_per_s=20)
        started.append(w)
        return {"PORT": str(w.port)}
    yield place
    for w in started:
        w.proc.kill()


@pytest.fixture
def docs_fleet(tmp_path: Path) -> Iterator[FixtureFn]:
    """Three emulated groups (6 slots, the default speeds, start-up 0) behind the real gateway with
    the production flags; ``AUTOSCALER_GATEWAY_URL`` is the gateway."""
    started: list = []

    def place(folder: Path) -> dict[str, str]:
        workers = start_workers(tmp_path, 3)
        started.extend(w.proc for w in workers)
        gw = start_gateway(tmp_path, worker_urls=[w.url for w in workers],
                           extra_args=["--cache-threshold", "0.5", "--balance-abs-threshold", "4"])
        started.append(gw.proc)
        for w in workers:
            gw.wait_healthy(w.url)
        return {"AUTOSCALER_GATEWAY_URL": gw.url}
    yield place
    for proc in started:
        proc.kill()


@pytest.fixture
def docs_prometheus(tmp_path: Path) -> Iterator[FixtureFn]:
    """Three emulated workers (20 decode tokens/s) scraped every second by a real Prometheus;
    ``fleet.yaml`` names them as g1-g3 (signals window and staleness 30 s);
    ``AUTOSCALER_PROMETHEUS_URL``, ``G1_URL``, ``G2_URL``, ``G3_URL`` and ``G3_PID`` are set."""
    from tests.support.prometheus import prepare, write_signal_policy

    workers: list = []
    proms: list = []

    def place(folder: Path) -> dict[str, str]:
        workers.extend(start_workers(tmp_path, 3, decode_tokens_per_s=20))
        addresses = [f"127.0.0.1:{w.port}" for w in workers]
        prom = prepare(tmp_path / "prometheus", addresses)
        proms.append(prom)
        prom.start()
        write_signal_policy(folder / "fleet.yaml", addresses, signals={"window_s": 30, "staleness_s": 30})
        return {"AUTOSCALER_PROMETHEUS_URL": prom.url, "G3_PID": str(workers[2].proc.pid),
                **{f"G{i}_URL": w.url for i, w in enumerate(workers, start=1)}}
    yield place
    for prom in proms:
        prom.close()
    for w in workers:
        w.proc.kill()


def build_history(d: Path, hours: int = 6) -> None:
    """TSDB blocks of recorded counters, as docs/backtest-from-prometheus.md makes them: the first
    ``hours`` of the vendored ServeGen trace at peak use 0.5 for the default policy, counted into g1's
    worker's three counters (instance 10.0.0.11:30000) every 15 s (tests/test_frontier.py takes a day)."""
    import numpy as np

    from autoscaler.policy.loader import load_policy
    from autoscaler.sim.backtest import prepare_trace
    from tests.support.prometheus import Series, load_history

    policy = load_policy(REPO / "policies" / "default.yaml").policy
    trace, _, _ = prepare_trace(str(REPO / "examples/traces/servegen-m-small"), "auto", policy, 0.5, 0)
    epoch = trace.start_epoch_s + trace.t_s
    times = np.arange(epoch[0] - epoch[0] % 86400, epoch[0] - epoch[0] % 86400 + hours * 3600 + 1, 15.0)
    n = np.searchsorted(epoch, times, side="right")
    counts = {"sglang:num_requests_total": n,
              "sglang:prompt_tokens_total": np.concatenate([[0], np.cumsum(trace.input_tokens)])[n],
              "sglang:generation_tokens_total": np.concatenate([[0], np.cumsum(trace.output_tokens)])[n]}
    labels = {"instance": "10.0.0.11:30000", "job": "sglang"}
    load_history(d / "data", [Series(name, labels, list(zip(times.tolist(), values.tolist(), strict=True)),
                                     kind="counter") for name, values in counts.items()])


@pytest.fixture
def docs_history(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Iterator[FixtureFn]:
    """A Prometheus serving the recorded history of ``build_history`` (no scrape targets) as
    ``AUTOSCALER_PROMETHEUS_URL``."""
    from tests.support.prometheus import Prometheus, write_config

    built = shared(tmp_path_factory, "history", build_history)
    proms: list = []

    def place(folder: Path) -> dict[str, str]:
        shutil.copytree(built / "data", tmp_path / "data")
        write_config(tmp_path / "prometheus.yml", [], 15)
        prom = Prometheus(port=free_port(), data_dir=tmp_path / "data", config_path=tmp_path / "prometheus.yml",
                          log_path=tmp_path / "prometheus.log", targets=())
        proms.append(prom)
        prom.start()
        return {"AUTOSCALER_PROMETHEUS_URL": prom.url}
    yield place
    for prom in proms:
        prom.close()


@pytest.mark.parametrize("block", CONSOLE, ids=[b.id for b in CONSOLE])
def test_console_block_runs_as_shown(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    folder = workdir(tmp_path / "work")
    env = base_env(folder)
    if block.fixture is not None:
        assert block.fixture in FIXTURES, f"{block.id}: unknown fixture {block.fixture!r} (known: {FIXTURES})"
        env.update(request.getfixturevalue(f"docs_{block.fixture}")(folder))
    failures = []
    for command, got, code in run_block(block, folder, env):
        if code != command.exit_code:
            failures.append(f"$ {command.text}\nexited {code}, the doc shows {command.exit_code}")
        if not output_matches(command.expected, got):
            failures.append(f"$ {command.text}\n--- the doc shows:\n" + "\n".join(command.expected)
                            + "\n--- it printed:\n" + "\n".join(got))
    assert not failures, f"{block.id}:\n" + "\n\n".join(failures)


def test_every_shown_command_is_in_a_console_block_or_marked_as_not_run() -> None:
    """A ``$ `` prompt outside a console block would be a command no test runs, unless the block is
    tagged ``sh`` or ``text`` on purpose (it cannot run here; its reason is next to it)."""
    stray = [f"{b.id}: ```{b.info}" for b in blocks() if b.info.split()[:1] not in (["console"], ["sh"], ["text"])
             and any(line.startswith("$ ") for line in b.body.splitlines())]
    assert not stray, "commands shown with a '$ ' prompt outside a console, sh or text block:\n" + "\n".join(stray)


def test_the_matcher_is_loose_on_numbers_and_strict_on_words() -> None:
    assert line_matches("a [...] b", "a [x y] b") and not line_matches("a [...] b", "a [x y] c")
    shown = ["policies/default.yaml: ok", "...", "wall s 0.17 0.00", "trace: azure ..."]
    assert output_matches(shown, ["policies/default.yaml: ok", "x", "y", "wall s   12.5  3", "trace: azure, 9 rows"])
    assert output_matches(shown, ["policies/default.yaml: ok", "wall s 1 2", "trace: azure"])
    assert not output_matches(shown, ["policies/default.yaml: bad", "wall s 1 2", "trace: azure"])
    assert not output_matches(shown, ["policies/default.yaml: ok", "wall s 1", "trace: azure"])
    assert not output_matches(shown, ["policies/default.yaml: ok", "wall s 1 2", "trace: azure", "more"])
    assert not output_matches(["a"], [])
    cmd = parse_console(Block(REPO / "README.md", 1, "console", "$ x \\\n  --y\nout\n[exit 2]\n$ z\n"))
    with pytest.raises(ValueError, match="without a"):
        parse_console(Block(REPO / "README.md", 1, "console", ""))
    assert [(c.text, c.expected, c.exit_code) for c in cmd] == [("x \\\n  --y", ["out"], 2), ("z", [], 0)]


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = FENCE.sub("", path.read_text())
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_in_the_docs_resolves() -> None:
    """Moving sections between pages (issue 21) must not leave a link to a page or heading that is gone."""
    broken = []
    for path in DOCS:
        for m in LINK.finditer(FENCE.sub("", path.read_text())):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_docs_index_lists_every_page() -> None:
    """docs/README.md is the index: one line per page, so a new page is never out of reach."""
    index = (REPO / "docs" / "README.md").read_text()
    listed = set(re.findall(r"^- \[([\w.-]+\.md)\]\(\1\)", index, re.M))
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert listed == pages, f"not in docs/README.md: {sorted(pages - listed)}; listed but missing: {sorted(listed - pages)}"
