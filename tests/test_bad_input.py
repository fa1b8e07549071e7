"""Bad input, everywhere (issue 12; docs/interfaces.md "Bad input, everywhere"): UTF-8 only, every
argument and output path checked before any work, one line on stderr and nothing else, exit 2;
snapshots as strict as policies; values no real trace has rejected or flagged; a total bound on
`emulate load --max-seconds`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.procs import PYTHON, REPO, bad, emulated_worker, free_port

POLICY = str(REPO / "policies/default.yaml")
SNAPSHOT = REPO / "examples/snapshots/busy-morning.json"
AZURE = REPO / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"
SERVEGEN = str(REPO / "examples/traces/servegen-m-small")


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A path no one can write, root included: its parent is a regular file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    return blocker / "out.file"


# ----------------------------------------------------------------------------- UTF-8 only
def test_a_policy_that_is_not_utf8_or_holds_a_nul_is_bad_input(tmp_path):
    text = Path(POLICY).read_text()
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(("# Politique de mise à l'échelle\n" + text).encode("latin-1"))
    bad(cli("policy", "validate", str(latin)), f"{latin}:1: not UTF-8 text")
    bad(cli("simulate", "--policy", str(latin), "--trace", str(AZURE)), f"{latin}:1: not UTF-8 text")
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(text.encode() + b"\x00\n")
    bad(cli("policy", "validate", str(nul)), f"{nul}:", "NUL byte")
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())  # still UTF-8
    assert cli("policy", "validate", str(bom)).returncode == 0


def test_a_snapshot_that_is_not_utf8_is_bad_input(tmp_path):
    snap = tmp_path / "s.json"
    snap.write_bytes(SNAPSHOT.read_bytes().replace(b'"at"', '"\u00e0t"'.encode("utf-16-le"), 1))
    bad(cli("decide", "--policy", POLICY, "--snapshot", str(snap)), f"{snap}:", "not UTF-8 text")


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("args, needle", [
    (["decide", "--policy", POLICY, "--snapshot", str(SNAPSHOT), "--at", "monday 9am"], "--at: 'monday 9am'"),
    (["simulate", "--policy", POLICY, "--trace", str(AZURE), "--start-at", "soon"], "--start-at: 'soon'"),
    (["simulate", "--policy", POLICY, "--trace", str(AZURE), "--seed", "-1"], "--seed: -1 is negative"),
    (["simulate", "--policy", POLICY, "--trace", str(AZURE), "--peak-utilization", "1e-9"], "--peak-utilization"),
    (["simulate", "--policy", POLICY, "--trace", str(AZURE), "--trace-format", "parquet"], "--trace-format"),
    (["simulate", "--policy", POLICY, "--trace", str(AZURE), "--frobnicate"], "--frobnicate: unknown argument"),
    (["decide", "--policy", POLICY], "--snapshot: required"),
    (["report", "--db", "sqlite:///x.db", "--from", "2026-01-05", "--to", "2026-01-06", "--source", "lab"],
     "--source: 'lab'"),
    (["emulate", "load", "--target", "http://127.0.0.1:9", "--trace", str(AZURE), "--seed", "-3"],
     "--seed: -3 is negative"),
])
def test_bad_arguments_are_one_line_without_a_usage_block(args, needle):
    err = bad(cli(*args), needle)
    assert "usage:" not in err and "Traceback" not in err


def test_a_bad_database_url_in_the_environment_is_named_as_that_variable():
    p = subprocess.run([PYTHON, "-m", "autoscaler", "report", "--from", "2026-01-05", "--to", "2026-01-06"],
                       capture_output=True, text=True, cwd=REPO, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "AUTOSCALER_DATABASE_URL": "ledger.db"})
    err = bad(p, "AUTOSCALER_DATABASE_URL: 'ledger.db' is not a database URL")
    assert "--db" not in err


# ----------------------------------------------------------------------------- outputs first
def test_unwritable_outputs_are_bad_input_before_any_work(tmp_path, unwritable):
    started = time.monotonic()
    # the 14-day replay takes 10 s and more: each of these must fail before it starts
    for flag in ("--timeline-out", "--plot"):
        target = str(unwritable) + (".html" if flag == "--plot" else ".csv")
        bad(cli("simulate", "--policy", POLICY, "--trace", SERVEGEN, "--compare", flag, target),
            f"{flag}: cannot write {target}")
    bad(cli("simulate", "--policy", POLICY, "--trace", SERVEGEN, "--db", f"sqlite:///{unwritable}"), "--db: cannot write")
    assert time.monotonic() - started < 20
    bad(cli("decide", "--policy", POLICY, "--snapshot", str(SNAPSHOT), "--memory-out", str(unwritable)),
        f"--memory-out: cannot write {unwritable}")
    bad(cli("decide", "--policy", POLICY, "--snapshot", str(SNAPSHOT), "--memory-out", str(tmp_path)),
        "--memory-out:", "is a directory")
    # report --output: exit 2 like every other output (it was 1)
    from autoscaler.ledger.store import Ledger
    from tests.support.ledger_runs import record_live

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url) as ledger:
        record_live(ledger, hours=24)
    bad(cli("report", "--db", url, "--from", "2026-01-05", "--to", "2026-01-06", "--output", str(unwritable)),
        f"--output: cannot write {unwritable}")
    # emulate load --outcomes: before the target is even contacted (nothing listens there: exit 1 otherwise)
    bad(cli("emulate", "load", "--target", f"http://127.0.0.1:{free_port()}", "--trace", str(AZURE),
            "--outcomes", str(unwritable)), f"--outcomes: cannot write {unwritable}")
    assert not list(tmp_path.glob("not-a-dir*/*"))


# ----------------------------------------------------------------------------- snapshots
def _snapshot(tmp_path: Path, edit) -> str:
    data = json.loads(SNAPSHOT.read_text())
    edit(data)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.update(memroy={}), "memroy: unknown field"),
    (lambda d: d.update(memory={"last_scaleup_at": "2026-01-05T08:00:00Z"}), "memory.last_scaleup_at: unknown field"),
    (lambda d: d["fleet"].update(sync=True), "fleet.sync: unknown field"),
    (lambda d: d["fleet"]["groups"]["g1"].update(phaze="ready"), "fleet.groups.g1.phaze: unknown field"),
    (lambda d: d.pop("fleet"), "fleet: required"),
    (lambda d: d["signals"]["groups"]["g1"].update(running=-6), "signals.groups.g1.running: -6 is negative"),
    (lambda d: d["signals"]["fleet"].update(queued=-1), "signals.fleet.queued: -1 is negative"),
    (lambda d: d["signals"]["groups"]["g1"].update(kv_usage=1.5), "signals.groups.g1.kv_usage: 1.5 is above 1"),
    (lambda d: d.update(memory={"startup_durations_s": [600, -5]}), "memory.startup_durations_s[1]: -5 is negative"),
])
def test_a_snapshot_is_validated_as_strictly_as_a_policy(tmp_path, edit, needle):
    bad(cli("decide", "--policy", POLICY, "--snapshot", _snapshot(tmp_path, edit)), needle)


def test_decide_memory_out_chains_into_the_next_decide(tmp_path):
    mem = tmp_path / "mem.json"
    assert cli("decide", "--policy", POLICY, "--snapshot", str(SNAPSHOT), "--memory-out", str(mem)).returncode == 0
    path = _snapshot(tmp_path, lambda d: d.update(memory=json.loads(mem.read_text())))
    p = cli("decide", "--policy", POLICY, "--snapshot", path)
    assert p.returncode == 0, p.stderr


# ----------------------------------------------------------------------------- absurd values
def _azure_with(tmp_path: Path, line_no: int, row: str) -> Path:
    lines = AZURE.read_text().splitlines()
    lines[line_no - 1] = row
    path = tmp_path / "azure.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_row_of_1e14_input_tokens_is_the_bad_row(tmp_path):
    stamp = AZURE.read_text().splitlines()[100].split(",")[0]
    trace = _azure_with(tmp_path, 101, f"{stamp},100000000000000,200")
    bad(cli("simulate", "--policy", POLICY, "--trace", str(trace)),
        f"{trace}:101: ContextTokens: 100,000,000,000,000 is not a plausible token count")
    p = cli("simulate", "--policy", POLICY, "--trace", str(trace), "--skip-bad-rows", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    ref = json.loads(cli("simulate", "--policy", POLICY, "--trace", str(AZURE), "--json").stdout)
    assert out["trace"]["bad_rows"] == 1
    assert out["requests"] > 0.9 * ref["requests"]  # not thinned to a handful by the outlier


def test_one_far_future_timestamp_is_the_one_bad_row_not_everything_after_it(tmp_path):
    trace = _azure_with(tmp_path, 101, "2999-01-01 00:00:00.0000000,500,100")
    p = cli("simulate", "--policy", POLICY, "--trace", str(trace), "--skip-bad-rows", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    rows = len(AZURE.read_text().splitlines()) - 1
    assert out["trace"]["requests_read"] == rows and out["trace"]["bad_rows"] == 1
    bad(cli("simulate", "--policy", POLICY, "--trace", str(trace)), f"{trace}:101: TIMESTAMP: 2999-01-01")
    # a year-long pause between two rows is no real trace either
    lines = ["timestamp_s,input_tokens,output_tokens"] + [f"{i},300,50" for i in range(50)]
    lines.insert(26, f"{40_000_000},300,50")  # 463 days in: the outlier
    rel = tmp_path / "rel.csv"
    rel.write_text("\n".join(lines) + "\n")
    p = cli("simulate", "--policy", POLICY, "--trace", str(rel), "--skip-bad-rows", "--peak-utilization", "0.01",
            "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["trace"]["bad_rows"] == 1


def test_a_scale_that_keeps_a_handful_of_requests_warns_loudly():
    p = cli("simulate", "--policy", POLICY, "--trace", str(AZURE), "--peak-utilization", "0.01", "--json")
    assert p.returncode == 0, p.stderr
    kept = json.loads(p.stdout)["requests"]
    assert kept < 200
    assert f"WARNING: load scaling kept only {kept:,} of 19,366 requests" in p.stderr
    quiet = cli("simulate", "--policy", POLICY, "--trace", str(AZURE), "--json")
    assert "load scaling kept only" not in quiet.stderr


# ----------------------------------------------------------------------------- emulate load bound
def test_emulate_load_max_seconds_bounds_the_whole_run(tmp_path):
    lines = ["timestamp_s,input_tokens,output_tokens"] + [f"{0.1 * i:.1f},200,4000" for i in range(20)]
    trace = tmp_path / "long.csv"
    trace.write_text("\n".join(lines) + "\n")
    outcomes = tmp_path / "o.jsonl"
    # 4,000 tokens at 20 tokens/s: each request would stream for 200 s
    with emulated_worker(tmp_path, decode_tokens_per_s=20, prefill_tokens_per_s=500000) as w:
        started = time.monotonic()
        p = subprocess.run([PYTHON, "-m", "autoscaler.emulator", "load", "--target", w.url, "--trace", str(trace),
                            "--max-seconds", "4", "--json", "--outcomes", str(outcomes)],
                           capture_output=True, text=True, cwd=REPO, timeout=120)
        wall = time.monotonic() - started
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["sent"] == 20 and summary["failures"] == {"deadline": 20}
    assert wall < 4 + 6  # the bound plus start-up and the reachability check, not 120 s of timeouts
    assert all(json.loads(x)["reason"] == "deadline" for x in outcomes.read_text().splitlines())


def test_servegen_rows_follow_one_set_of_rules(tmp_path):
    """ServeGen is parsed by one row reader (no vectorised copy of the rules): a rate no client has
    is the bad row, named with its file and line, and --skip-bad-rows skips just that window."""
    import shutil

    src = REPO / "tests/data/traces/servegen_small"
    trace = tmp_path / "sg"
    shutil.copytree(src, trace)
    chunk = trace / "chunk-0-trace.csv"
    lines = chunk.read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = "1e9"  # requests per second from one client
    lines[1] = ",".join(cells)
    chunk.write_text("\n".join(lines) + "\n")
    from autoscaler.errors import BadInput
    from autoscaler.sim.traces import _servegen_rows, load_trace

    with pytest.raises(BadInput, match=r"chunk-0-trace.csv:2: rate: 1e9 requests/s is not plausible"):
        load_trace(trace)
    assert load_trace(trace, skip_bad_rows=True).bad_rows == 1
    import autoscaler.sim.traces as traces

    assert not hasattr(traces, "_servegen_fast") and callable(_servegen_rows)


def test_a_csv_field_over_the_readers_limit_is_a_bad_row_not_a_traceback(tmp_path):
    """Issue 35 #11: a field over 131,072 characters raised ``_csv.Error`` (a traceback, exit 1)
    in ``simulate`` and ``emulate load``, even with --skip-bad-rows."""
    lines = ["timestamp_s,input_tokens,output_tokens,session_id"] + [f"{i},300,50,s{i % 3}" for i in range(40)]
    lines.insert(21, "20.5,300,50," + "x" * 140_000)  # line 22 of the file
    trace = tmp_path / "huge.csv"
    trace.write_text("\n".join(lines) + "\n")
    needle = f"{trace}:22: a field is longer than 131,072 characters"
    bad(cli("simulate", "--policy", POLICY, "--trace", str(trace)), needle)
    p = cli("simulate", "--policy", POLICY, "--trace", str(trace), "--skip-bad-rows", "--peak-utilization", "0.01",
            "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)["trace"]
    assert (got["requests_read"], got["bad_rows"]) == (41, 1), got
    # emulate load reads the trace before it contacts the target: bad input, exit 2, one line
    bad(cli("emulate", "load", "--target", f"http://127.0.0.1:{free_port()}", "--trace", str(trace)), needle)
    # the same in the header line, and in an Azure trace
    head = tmp_path / "head.csv"
    head.write_text("timestamp_s,input_tokens," + "y" * 140_000 + "\n0,1,1\n")
    bad(cli("simulate", "--policy", POLICY, "--trace", str(head), "--trace-format", "csv"), f"{head}:1: header: a field")
    azure = _azure_with(tmp_path, 101, "2023-11-16 18:15:46.6805900," + "9" * 140_000 + ",200")
    bad(cli("simulate", "--policy", POLICY, "--trace", str(azure)), f"{azure}:101: a field is longer")
