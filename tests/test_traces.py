"""Trace loaders: exact values on handmade fixtures, every kind of bad row, auto-detection,
and the vendored real traces (examples/traces/)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from autoscaler.errors import BadInput
from autoscaler.sim.traces import (
    GAMMA,
    POISSON,
    WEIBULL,
    RateTrace,
    Trace,
    detect_format,
    load_trace,
    mooncake_sessions,
)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "data" / "traces"
REAL = REPO / "examples" / "traces"
AZURE_REAL = REAL / "azure-2023-conv" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE_REAL = REAL / "mooncake-fast25-conversation" / "conversation_trace.jsonl"
SERVEGEN_REAL = REAL / "servegen-m-small"

MONDAY_2026_01_05 = 1767571200.0  # datetime(2026, 1, 5, tzinfo=timezone.utc).timestamp()


# --------------------------------------------------------------------------------- good files
def test_azure_fixture_exact() -> None:
    tr = load_trace(FIX / "azure_small.csv")
    assert isinstance(tr, Trace) and tr.format == "azure"
    # t = 0 is the first request, 2023-11-16 18:15:46.680590 UTC (7 digits, the 7th dropped).
    assert tr.start_epoch_s == pytest.approx(1700158546.680590, abs=1e-6)
    assert tr.start == datetime(2023, 11, 16, 18, 15, 46, 680590, tzinfo=timezone.utc)
    # 50.995169 - 46.680590 = 4.314579 s (twice: equal times are in order); 20:46.68 - 15:46.68 = 300 s
    assert tr.t_s.tolist() == pytest.approx([0.0, 4.314579, 4.314579, 300.0], abs=1e-6)
    assert tr.input_tokens.tolist() == [374, 396, 0, 1020]
    assert tr.output_tokens.tolist() == [44, 109, 0, 129]
    assert tr.t_s.dtype == np.float64 and tr.input_tokens.dtype == np.int64
    assert tr.session.tolist() == [-1, -1, -1, -1]
    assert tr.prefix_blocks is None
    assert tr.span_s == pytest.approx((0.0, 300.0))
    assert (tr.requests_read, tr.bad_rows, tr.gap_windows) == (4, 0, [])


def test_azure_ignores_start_at_because_its_times_are_absolute() -> None:
    tr = load_trace(FIX / "azure_small.csv", start_at=datetime(2030, 1, 1))
    assert tr.start.year == 2023


def test_relative_csv_starts_monday_2026_01_05_and_numbers_sessions() -> None:
    tr = load_trace(FIX / "relative_small.csv")
    assert tr.format == "csv"
    assert tr.start_epoch_s == MONDAY_2026_01_05
    assert tr.start.weekday() == 0  # Monday
    assert tr.t_s.tolist() == [0.5, 2.0, 2.0, 10.25]  # as written, seconds since that midnight
    assert tr.input_tokens.tolist() == [100, 200, 300, 400]
    assert tr.output_tokens.tolist() == [10, 20, 30, 40]
    # session_id numbered in order of first appearance: alice 0, bob 1, empty -1, alice 0
    assert tr.session.tolist() == [0, 1, -1, 0]
    assert tr.span_s == (0.5, 10.25)


@pytest.mark.parametrize(
    ("start_at", "epoch"),
    [
        (datetime(2026, 3, 2, 6, 0), 1772431200.0),  # naive = UTC: 2026-03-02 06:00Z
        (datetime(2026, 3, 2, 7, 0, tzinfo=timezone(timedelta(hours=1))), 1772431200.0),  # same instant
    ],
)
def test_start_at_places_relative_traces(start_at: datetime, epoch: float) -> None:
    for path in (FIX / "relative_small.csv", FIX / "mooncake_small.jsonl", FIX / "servegen_small"):
        assert load_trace(path, start_at=start_at).start_epoch_s == epoch


def test_epoch_csv_starts_at_its_first_request() -> None:
    tr = load_trace(FIX / "epoch_small.csv")
    assert tr.start_epoch_s == 1767571200.0
    assert tr.t_s.tolist() == [0.0, 60.5]
    assert tr.session.tolist() == [-1, -1]  # no session_id column


def test_mooncake_fixture_exact() -> None:
    tr = load_trace(FIX / "mooncake_small.jsonl")
    assert tr.format == "mooncake"
    assert tr.start_epoch_s == MONDAY_2026_01_05
    assert tr.t_s.tolist() == [0.0, 0.0, 1.5, 2.0, 2.5, 3.0, 3.0, 4.25]  # ms / 1000
    assert tr.input_tokens.tolist() == [1000, 600, 1500, 700, 400, 2000, 900, 300]
    assert tr.output_tokens.tolist() == [10, 20, 30, 40, 50, 60, 70, 80]
    assert tr.prefix_blocks is not None and tr.prefix_blocks[2] == (0, 10, 11)
    # Block 0 opens 7 of 8 requests (>= 5%) and 4 distinct blocks follow it (10, 20, 30, 40):
    # a shared system prompt. The key is the next block: conversation 10 has three turns.
    # Request 5 is only the system prompt (-1); request 8 has no system prompt (its block 50).
    assert tr.session.tolist() == [10, 20, 10, 30, -1, 10, 40, 50]
    assert tr.span_s == (0.0, 4.25)


@pytest.mark.parametrize(
    ("blocks", "sessions"),
    [
        # One conversation dominating a short trace: block 7 is followed only by 8, so it is the
        # conversation itself, not a shared prompt.
        ([(7, 8), (7, 8, 9), (7, 8, 9, 10)], [7, 7, 7]),
        # A two-block system prompt: 0 is always followed by 1, and 1 by 3 distinct blocks.
        ([(0, 1, 5), (0, 1, 6), (0, 1, 7), (0, 1, 5, 8)], [5, 6, 7, 5]),
        # Only two branches after block 0 (fewer than 3): not shared.
        ([(0, 1), (0, 2), (0, 1, 3)], [0, 0, 0]),
        ([(), (4,)], [-1, 4]),
    ],
)
def test_mooncake_session_key_table(blocks: list[tuple[int, ...]], sessions: list[int]) -> None:
    assert mooncake_sessions(blocks).tolist() == sessions


def test_servegen_fixture_exact() -> None:
    rt = load_trace(FIX / "servegen_small")
    assert isinstance(rt, RateTrace) and rt.format == "servegen"
    assert rt.start_epoch_s == MONDAY_2026_01_05  # t_sec 0 = that midnight
    assert rt.clients == ["chunk-0-trace.csv", "chunk-1-trace.csv"]
    assert rt.window_s == 600.0
    assert rt.window_start_s.tolist() == [0.0, 600.0, 1200.0, 1800.0]
    assert rt.rate.tolist() == [[2.0, 3.0, 0.0, 1.0], [2.0, 0.0, 0.0, 0.0]]
    assert rt.family.tolist() == [[GAMMA, GAMMA, POISSON, POISSON], [WEIBULL, POISSON, POISSON, POISSON]]
    assert rt.shape[:, 0].tolist() == [1.0, 0.5]
    assert rt.total_rate.tolist() == [4.0, 3.0, 0.0, 1.0]
    assert rt.gap_windows == [(1200.0, 1800.0)]  # every client reads 0 at once
    assert rt.span_s == (0.0, 2400.0)  # first window start to last window end
    assert (rt.requests_read, rt.bad_rows) == (8, 0)


# --------------------------------------------------------------------------------- detection
@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (FIX / "azure_small.csv", "azure"),
        (FIX / "relative_small.csv", "csv"),
        (FIX / "epoch_small.csv", "csv"),
        (FIX / "mooncake_small.jsonl", "mooncake"),
        (FIX / "servegen_small", "servegen"),
        (AZURE_REAL, "azure"),
        (MOONCAKE_REAL, "mooncake"),
        (SERVEGEN_REAL, "servegen"),
    ],
)
def test_auto_detects_each_format(path: Path, fmt: str) -> None:
    assert detect_format(path) == fmt


def test_unrecognised_file_is_bad_input_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "odd.csv"
    p.write_text("when,prompt,completion\n1,2,3\n")
    with pytest.raises(BadInput, match=r"^.*odd\.csv: not a recognised trace \(first line 'when,prompt,completion'\)"):
        load_trace(p)
    j = tmp_path / "other.jsonl"
    j.write_text('{"ts": 1, "input_length": 3}\n')
    with pytest.raises(BadInput, match=r"other\.jsonl: not a recognised trace"):
        load_trace(j)
    d = tmp_path / "dir"
    d.mkdir()
    with pytest.raises(BadInput, match=r"dir: directory holds no ServeGen chunk-\*-trace\.csv files"):
        load_trace(d)
    with pytest.raises(BadInput, match=r"nope\.csv: no such file or directory"):
        load_trace(tmp_path / "nope.csv")


def test_explicit_format_mismatch_is_bad_input() -> None:
    with pytest.raises(BadInput, match=r"servegen_small: is a directory"):
        load_trace(FIX / "servegen_small", "csv")
    with pytest.raises(BadInput, match=r"azure_small\.csv: a ServeGen trace is a directory"):
        load_trace(FIX / "azure_small.csv", "servegen")
    with pytest.raises(BadInput, match=r"trace format 'parquet' is not one of"):
        load_trace(FIX / "azure_small.csv", "parquet")


# --------------------------------------------------------------------------------- bad rows
AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
CS = "timestamp_s,input_tokens,output_tokens\n"
MC = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'

BAD_ROWS = [
    # (file name, content, FILE:LINE message after the file name)
    ("a.csv", AZ + "2023-11-16 18:15:46.6805900,374\n", "2: GeneratedTokens: missing column (expected 3 columns, got 2)"),
    ("a.csv", AZ + "2023-11-16 18:15:46.6805900,374,44,9\n", "2: expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got 4"),
    ("a.csv", AZ + "2023-11-16 18:15:46.6805900,abc,44\n", "2: ContextTokens: 'abc' is not a number"),
    ("a.csv", AZ + "2023-11-16 18:15:46.6805900,374,-3\n", "2: GeneratedTokens: -3 is negative"),
    ("a.csv", AZ + "yesterday,374,44\n", "2: TIMESTAMP: 'yesterday' is not a date and time"),
    (
        "a.csv",
        AZ + "2023-11-16 18:15:50.9951690,1,1\n\n2023-11-16 18:15:46.6805900,1,1\n",  # line 3 is blank
        "4: TIMESTAMP: 2023-11-16 18:15:46.6805900 is out of order (before the previous row's 2023-11-16 18:15:50.9951690)",
    ),
    ("trace.csv", CS + "1,5,5\n" * 15 + "2,5,-3\n", "17: output_tokens: -3 is negative"),
    ("trace.csv", CS + "x,5,5\n", "2: timestamp_s: 'x' is not a number"),
    ("trace.csv", CS + "-1,5,5\n", "2: timestamp_s: -1 is negative"),
    ("trace.csv", CS + "nan,5,5\n", "2: timestamp_s: 'nan' is not a finite number"),
    ("trace.csv", CS + "1,1.5,5\n", "2: input_tokens: '1.5' is not a whole number"),
    ("trace.csv", CS + "1,,5\n", "2: input_tokens: missing value"),
    ("trace.csv", CS + "1,5\n", "2: output_tokens: missing column (expected 3 columns, got 2)"),
    ("trace.csv", CS + "5,1,1\n4,1,1\n", "3: timestamp_s: 4 is out of order (before the previous row's 5)"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": 10\n', "2: bad JSON: Expecting ',' delimiter (column 36)"),
    ("m.jsonl", MC + "[1, 2]\n", "2: bad JSON: expected an object, got list"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": -3, "output_length": 2, "hash_ids": []}\n', "2: input_length: -3 is negative"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": 3, "hash_ids": []}\n', "2: output_length: missing"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": "3", "output_length": 2, "hash_ids": []}\n', "2: input_length: '3' is not a whole number"),
    ("m.jsonl", MC + '{"timestamp": "x", "input_length": 3, "output_length": 2, "hash_ids": []}\n', "2: timestamp: 'x' is not a number"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": [1, -2]}\n', "2: hash_ids: not a list of non-negative whole numbers"),
    ("m.jsonl", MC + '{"timestamp": 1, "input_length": 3, "output_length": 2}\n', "2: hash_ids: missing"),
    (
        "m.jsonl",
        '{"timestamp": 9, "input_length": 1, "output_length": 1, "hash_ids": []}\n' + MC,
        "2: timestamp: 0 is out of order (before the previous row's 9)",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_ROWS)
def test_bad_row_names_file_and_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(BadInput) as err:
        load_trace(p)
    text = str(err.value)
    assert text.startswith(f"{p}:{message}")
    assert "\n" not in text


SG_GOOD = "0,1.0,1.0,Gamma,1.0,1.0\n"
BAD_SERVEGEN = [
    ("0,1.0,1.0,Gamma,1.0\n", "1: scale: missing column (expected 6 columns, got 5)"),
    (SG_GOOD + "600,-2,1.0,Gamma,1.0,1.0\n", "2: rate: -2 is negative"),
    (SG_GOOD + "600,1.0,1.0,Pareto,1.0,1.0\n", "2: pat: 'Pareto' is not Gamma, Weibull or empty"),
    (SG_GOOD + "601,1.0,1.0,Gamma,1.0,1.0\n", "2: t_sec: 601 is not a multiple of the 600 s window"),
    (SG_GOOD + "0,1.0,1.0,Gamma,1.0,1.0\n", "2: t_sec: 0 is out of order (not after 0)"),
    (SG_GOOD + "600,1.0,1.0,Weibull,0,1.0\n", "2: shape: 0 must be above 0 for a Weibull client with rate 1"),
    (SG_GOOD + "600,one,1.0,Gamma,1.0,1.0\n", "2: rate: 'one' is not a number"),
]


@pytest.mark.parametrize(("content", "message"), BAD_SERVEGEN)
def test_bad_servegen_row_names_client_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    d = tmp_path / "sg"
    d.mkdir()
    (d / "chunk-0-trace.csv").write_text(SG_GOOD)
    (d / "chunk-1-trace.csv").write_text(content)
    with pytest.raises(BadInput) as err:
        load_trace(d)
    assert str(err.value) == f"{d / 'chunk-1-trace.csv'}:{message}"


def test_skip_bad_rows_counts_them(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    # rows: ok, negative, ok, out of order (3 < 4), not a number, ok
    p.write_text(CS + "1,5,5\n2,-1,5\n4,5,5\n3,5,5\nx,5,5\n6,7,7\n")
    tr = load_trace(p, skip_bad_rows=True)
    assert tr.t_s.tolist() == [1.0, 4.0, 6.0]
    assert tr.input_tokens.tolist() == [5, 5, 7]
    assert (tr.requests_read, tr.bad_rows) == (6, 3)

    m = tmp_path / "m.jsonl"
    m.write_text(MC + "not json\n" + MC.replace('"timestamp": 0', '"timestamp": 5'))
    tm = load_trace(m, skip_bad_rows=True)
    assert (len(tm), tm.requests_read, tm.bad_rows) == (2, 3, 1)

    d = tmp_path / "sg"
    d.mkdir()
    (d / "chunk-0-trace.csv").write_text(SG_GOOD + "600,1,1,Pareto,1,1\n1200,2.0,1.0,,0,0\n")
    rt = load_trace(d, skip_bad_rows=True)
    assert rt.rate.tolist() == [[1.0, 0.0, 2.0]]  # the skipped window reads 0
    assert (rt.requests_read, rt.bad_rows) == (3, 1)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.csv", CS, "e.csv: empty trace, no requests"),
        ("e.csv", CS + "1,-1,1\n", "e.csv: empty trace, no requests (1 bad rows skipped)"),
        ("e.jsonl", "\n\n", "e.jsonl: empty file, no requests"),
    ],
)
def test_empty_trace_is_bad_input(tmp_path: Path, name: str, content: str, message: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(BadInput) as err:
        load_trace(p, skip_bad_rows=True)
    assert str(err.value) == f"{tmp_path / message}"


def test_servegen_all_zero_is_empty(tmp_path: Path) -> None:
    d = tmp_path / "sg"
    d.mkdir()
    (d / "chunk-0-trace.csv").write_text("0,0,0,,0,0\n600,0,0,,0,0\n")
    with pytest.raises(BadInput, match="every client reads 0 in every window"):
        load_trace(d)


def test_bad_header_is_line_1(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp_s,input_tokens\n1,2\n")
    with pytest.raises(BadInput, match=r"t\.csv:1: header: missing column output_tokens"):
        load_trace(p)
    p.write_text("timestamp_s,input_tokens,output_tokens,user\n1,2,3,x\n")
    with pytest.raises(BadInput, match=r"t\.csv:1: header: unknown column 'user'"):
        load_trace(p)


# --------------------------------------------------------------------------------- real traces
def test_real_servegen_gaps_are_37_windows_on_days_7_and_9_to_13() -> None:
    rt = load_trace(SERVEGEN_REAL)
    assert rt.rate.shape == (43, 2016)  # 43 clients x 14 days of 600 s windows
    assert rt.span_s == (0.0, 14 * 86400.0)
    assert len(rt.gap_windows) == 37
    days = sorted({int(a // 86400) for a, _ in rt.gap_windows})
    assert days == [7, 9, 10, 11, 12, 13]
    assert all(b - a == 600.0 for a, b in rt.gap_windows)
    for a, _ in rt.gap_windows:
        assert rt.total_rate[int(a // 600)] == 0.0
    assert (rt.total_rate > 0).sum() == 2016 - 37
    assert (rt.requests_read, rt.bad_rows) == (43 * 2016, 0)


def test_real_mooncake_session_is_the_block_after_the_shared_prompt() -> None:
    tr = load_trace(MOONCAKE_REAL)
    assert len(tr) == 12031 and tr.requests_read == 12031
    assert tr.prefix_blocks is not None
    assert {b[0] for b in tr.prefix_blocks} == {0}  # block 0 opens every request
    assert tr.session.tolist() == [b[1] for b in tr.prefix_blocks]
    assert len(set(tr.session.tolist())) == 7373
    assert int((tr.session == 7402).sum()) == 43  # the longest conversation
    assert tr.span_s == (0.0, 3536.999)
    assert np.all(np.diff(tr.t_s) >= 0)


def test_real_azure_loads_whole() -> None:
    tr = load_trace(AZURE_REAL)
    assert len(tr) == 19366 and tr.bad_rows == 0
    assert tr.start == datetime(2023, 11, 16, 18, 15, 46, 680590, tzinfo=timezone.utc)
    assert tr.span_s[1] == pytest.approx(3501.7219372, abs=1e-6)  # 19:14:08.4025270 - 18:15:46.6805900
    assert np.median(tr.input_tokens) == 1020 and np.median(tr.output_tokens) == 129
