"""The prepared-trace cache (autoscaler/sim/tracecache.py): a hit gives what preparing gives, and
any change of what a prepared trace depends on is a miss."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from autoscaler.policy import load_policy
from autoscaler.sim import backtest, tracecache

ROOT = Path(__file__).resolve().parents[1]
SERVEGEN = ROOT / "tests/data/traces/servegen_small"
AZURE = ROOT / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv"
MOONCAKE = ROOT / "examples/traces/mooncake-fast25-conversation/conversation_trace.jsonl"
POLICY = load_policy(ROOT / "policies/default.yaml").policy


@pytest.fixture
def counted(monkeypatch):
    """Count the real preparations (the cache's misses)."""
    calls = []
    real = backtest.prepare_trace

    def prepare(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(backtest, "prepare_trace", prepare)
    return calls


def same(a, b):
    ta, fa, ia = a
    tb, fb, ib = b
    assert fa == fb and ia == ib
    for name in ("t_s", "input_tokens", "output_tokens", "session"):
        assert np.array_equal(getattr(ta, name), getattr(tb, name)), name
    assert (ta.span_s, ta.start_epoch_s, ta.gap_windows, ta.load_scale, ta.path) == \
        (tb.span_s, tb.start_epoch_s, tb.gap_windows, tb.load_scale, tb.path)
    assert (ta.rate_source is None) == (tb.rate_source is None)
    if ta.rate_source is not None:
        assert np.array_equal(ta.rate_source.rate, tb.rate_source.rate)


def test_a_hit_is_what_preparing_gives_without_preparing(tmp_path, counted):
    fresh = backtest.prepare_trace(str(AZURE), "auto", POLICY, 0.5, 0)
    first = tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    second = tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 2  # the uncached call and the first through the cache; the second hit
    same(fresh, first)
    same(fresh, second)
    assert len(list(tmp_path.glob("*.pickle"))) == 1


def test_a_mooncake_hit_keeps_its_prefix_blocks(tmp_path, counted):
    first = tracecache.prepare_trace(tmp_path, str(MOONCAKE), "auto", POLICY, 0.5, 0)
    second = tracecache.prepare_trace(tmp_path, str(MOONCAKE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 1
    same(first, second)
    assert second[0].prefix_blocks == first[0].prefix_blocks and first[0].prefix_blocks


def test_a_servegen_hit_keeps_its_rate_windows(tmp_path, counted):
    first = tracecache.prepare_trace(tmp_path, str(SERVEGEN), "auto", POLICY, 0.5, 3)
    second = tracecache.prepare_trace(tmp_path, str(SERVEGEN), "auto", POLICY, 0.5, 3)
    assert len(counted) == 1
    same(first, second)
    assert second[0].rate_source is not None  # the rate oracle draws other seeds from it


@pytest.mark.parametrize("change", ["seed", "peak", "fleet", "speeds", "format", "bytes", "new file", "skip",
                                    "start", "path", "rename"])
def test_what_a_prepared_trace_depends_on_is_in_the_key(tmp_path, counted, change):
    trace = tmp_path / "trace"
    shutil.copytree(SERVEGEN, trace)
    # a file the loader skips (not named as a chunk), with a chunk's rows
    (trace / "zz-extra.csv").write_text((trace / "chunk-1-trace.csv").read_text())
    cache = tmp_path / "cache"
    args = dict(path=str(trace), fmt="auto", policy=POLICY, peak_utilization=0.5, seed=0)
    tracecache.prepare_trace(cache, **args)
    if change == "seed":
        args["seed"] = 1
    elif change == "peak":
        args["peak_utilization"] = 0.35
    elif change == "fleet":
        args["policy"] = POLICY.model_copy(update={"fleet": POLICY.fleet.model_copy(update={"ceiling_groups": 4})})
    elif change == "speeds":
        args["policy"] = POLICY.model_copy(update={"simulation": POLICY.simulation.model_copy(
            update={"prefill_tokens_per_s": POLICY.simulation.prefill_tokens_per_s * 2})})
    elif change == "format":
        args["fmt"] = "servegen"
    elif change == "start":
        args["start_at"] = datetime(2026, 3, 2, tzinfo=timezone.utc)
    elif change == "path":  # the same bytes elsewhere: the Trace says where it was read
        shutil.copytree(trace, tmp_path / "copy")
        args["path"] = str(tmp_path / "copy")
    elif change == "bytes":
        f = trace / "chunk-1-trace.csv"
        f.write_text(f.read_text().replace("2.0,2.0", "3.0,2.0", 1))
    elif change == "rename":  # the same bytes in the same order, now a chunk the loader reads
        (trace / "zz-extra.csv").rename(trace / "chunk-9-trace.csv")
    elif change == "new file":
        (trace / "notes.txt").write_text("a file the loader does not read still changes the key\n")
    else:
        args["skip_bad_rows"] = True
    got = tracecache.prepare_trace(cache, **args)
    assert len(counted) == 2
    again = tracecache.prepare_trace(cache, **args)  # and that one is cached in turn
    assert len(counted) == 2
    same(got, again)
    if change == "path":
        assert again[0].path == str(tmp_path / "copy")
    if change == "start":
        assert again[0].start_epoch_s == datetime(2026, 3, 2, tzinfo=timezone.utc).timestamp()


def test_the_code_that_prepares_a_trace_is_in_the_key():
    # every module of the package prepare_trace runs through (imports aside) is a file of the key
    import autoscaler.sim.loadscale
    import autoscaler.sim.traces

    keyed = {f.resolve() for f in tracecache._CODE_FILES}
    for module in (backtest, autoscaler.sim.traces, autoscaler.sim.loadscale, tracecache):
        assert Path(module.__file__).resolve() in keyed, module.__name__


def test_the_length_table_the_draws_pick_from_is_in_the_key(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(tracecache._DATA, data)
    monkeypatch.setattr(tracecache, "_DATA", data)
    args = (str(AZURE), "auto", POLICY, 0.5, 0, None, False)
    before = tracecache.cache_key(*args)
    table = next(data.glob("*.csv"))
    table.write_text(table.read_text() + "1,1\n")
    assert tracecache.cache_key(*args) != before


def test_a_changed_code_file_is_a_miss(tmp_path, counted, monkeypatch):
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    extra = tmp_path / "loader_v2.py"
    extra.write_text("# another version of the code that reads traces\n")
    monkeypatch.setattr(tracecache, "_CODE_FILES", tracecache._CODE_FILES + (extra,))
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 2


def test_an_unreadable_entry_is_prepared_again_and_written_over(tmp_path, counted):
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    (entry,) = tmp_path.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    got = tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 2
    same(got, backtest.prepare_trace(str(AZURE), "auto", POLICY, 0.5, 0))
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 3  # (the direct call above) the rewritten entry is read


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path, counted):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache's folder would be\n")
    got = tracecache.prepare_trace(blocked / "traces", str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(got[0]) > 0 and len(counted) == 1


def test_a_missing_trace_is_the_loaders_error(tmp_path):
    with pytest.raises(Exception, match="no such file or directory"):
        tracecache.prepare_trace(tmp_path, str(tmp_path / "absent.csv"), "auto", POLICY, 0.5, 0)
    assert not list(tmp_path.glob("*.pickle"))


def test_the_least_recently_used_entries_go_first(tmp_path, counted, monkeypatch):
    monkeypatch.setattr(tracecache, "MAX_ENTRIES", 2)
    for seed in (0, 1):
        tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, seed)
    for entry in tmp_path.glob("*.pickle"):  # older mtimes, seed 0's the oldest
        os.utime(entry, (1_000_000, 1_000_000))
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)  # a hit: now the most recent
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 2)  # a third: seed 1's goes
    assert len(list(tmp_path.glob("*.pickle"))) == 2
    n = len(counted)
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == n
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 1)
    assert len(counted) == n + 1


def test_a_hit_warns_as_the_first_run_did(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.02, 0)
    first = [r.getMessage() for r in caplog.records if "load scaling kept only" in r.getMessage()]
    assert first  # a peak use this low keeps a handful of the hour's requests
    caplog.clear()
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.02, 0)
    assert [r.getMessage() for r in caplog.records if "load scaling kept only" in r.getMessage()] == first


def test_only_the_caches_own_files_are_pruned_and_the_bytes_are_capped(tmp_path, counted, monkeypatch):
    mine = tmp_path / "model.pickle"
    mine.write_bytes(b"a user's own pickle in the folder given")
    os.utime(mine, (1, 1))
    monkeypatch.setattr(tracecache, "MAX_ENTRIES", 1)
    for seed in (0, 1):
        tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, seed)
    assert mine.exists() and len([p for p in tmp_path.iterdir() if p != mine]) == 1
    monkeypatch.setattr(tracecache, "MAX_ENTRIES", 8)
    size = next(p for p in tmp_path.iterdir() if p != mine).stat().st_size
    monkeypatch.setattr(tracecache, "MAX_BYTES", int(size * 1.5))  # room for one entry, not two
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 2)
    assert mine.exists() and len([p for p in tmp_path.iterdir() if p != mine]) == 1


def test_an_entry_others_can_write_is_not_read(tmp_path, counted, caplog):
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert (tmp_path.stat().st_mode & 0o777) != 0 and not any(
        p.stat().st_mode & 0o022 for p in tmp_path.glob("*.pickle"))
    tmp_path.chmod(0o777)  # a folder anyone may write into: anyone may plant an entry
    caplog.set_level(logging.WARNING)
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 2 and any("not read" in r.getMessage() for r in caplog.records)
    tmp_path.chmod(0o700)
    (entry,) = tmp_path.glob("*.pickle")
    entry.chmod(0o666)
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 3
    entry.chmod(0o600)
    tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(counted) == 3


def test_no_home_folder_is_no_cache_and_no_error(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert tracecache.default_dir() is None
    from autoscaler.sim import refcache
    assert refcache.default_dir() is None


def test_a_write_that_fails_leaves_no_partial_file(tmp_path, counted, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracecache.pickle, "dump", full)
    got = tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
    assert len(got[0]) > 0 and list(tmp_path.iterdir()) == []


def test_a_hit_raises_the_warnings_the_first_run_raised(tmp_path, monkeypatch):
    real = backtest.prepare_trace

    def noisy(*args, **kwargs):
        warnings.warn("overflow encountered in exp", RuntimeWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(backtest, "prepare_trace", noisy)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            tracecache.prepare_trace(tmp_path, str(AZURE), "auto", POLICY, 0.5, 0)
        assert [(w.category, str(w.message)) for w in seen] == [(RuntimeWarning, "overflow encountered in exp")]


def test_simulate_reads_the_trace_once_and_reports_the_same(tmp_path):
    cache = tmp_path / "traces"

    def run(*extra):
        p = subprocess.run([sys.executable, "-m", "autoscaler", "simulate", "--policy", "policies/default.yaml",
                            "--trace", str(AZURE), "--json", *extra],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        out.pop("wall_s", None)
        return out

    plain = run("--no-trace-cache", "--trace-cache", str(cache))
    assert not cache.exists()
    first = run("--trace-cache", str(cache))
    (entry,) = cache.glob("*.pickle")
    written = entry.stat().st_ino
    second = run("--trace-cache", str(cache))
    assert entry.stat().st_ino == written  # read, not prepared and written again
    for out in (first, second):
        out.pop("wall_s", None)
    assert first == plain and second == plain
