"""Load scale (docs/interfaces.md, "The backtest's definitions" -> "Load scale"): exact factors on
handmade traces, the busiest sliding 5 minutes after scaling, ServeGen arrivals with the
inter-arrival gap carried across windows, and the shipped token-length table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from autoscaler.errors import BadInput
from autoscaler.sim.loadscale import (
    busiest_window,
    derive_length_table,
    draw_arrivals,
    format_length_table,
    length_table,
    offered_concurrency,
    scale_trace,
    service_times_s,
)
from autoscaler.sim.traces import GAMMA, POISSON, WEIBULL, RateTrace, Trace, load_trace

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "data" / "traces"
REAL = REPO / "examples" / "traces"
DEFAULTS = dict(capacity_slots=18, prefill_tokens_per_s=2500.0, decode_tokens_per_s=20.0)


def _trace(t: list[float] | np.ndarray, inp: int = 0, out: int = 20) -> Trace:
    """A csv-like trace; with the defaults each request's service is 0/2500 + 20/20 = 1 s."""
    t_s = np.asarray(t, dtype=np.float64)
    n = t_s.size
    return Trace(
        format="csv", path="synthetic.csv", start_epoch_s=0.0, t_s=t_s,
        input_tokens=np.full(n, inp, dtype=np.int64), output_tokens=np.full(n, out, dtype=np.int64),
        session=np.arange(n, dtype=np.int64), prefix_blocks=None, span_s=(float(t_s[0]), float(t_s[-1])),
        requests_read=n, bad_rows=0, gap_windows=[],
    )


def _rate_trace(rate: np.ndarray, family: int, shape: float) -> RateTrace:
    rate = np.atleast_2d(np.asarray(rate, dtype=np.float64))
    nc, nw = rate.shape
    return RateTrace(
        format="servegen", path="synthetic", start_epoch_s=0.0, window_s=600.0,
        window_start_s=np.arange(nw) * 600.0, clients=[f"c{i}" for i in range(nc)], rate=rate,
        cv=np.zeros_like(rate), family=np.full(rate.shape, family, dtype=np.int8),
        shape=np.full(rate.shape, shape), scale=np.zeros_like(rate), span_s=(0.0, nw * 600.0),
        requests_read=rate.size, bad_rows=0, gap_windows=[],
    )


# --------------------------------------------------------------------------------- measures
@pytest.mark.parametrize(
    ("inp", "out", "prefill", "decode", "expected"),
    [
        (2500, 20, 2500, 20, 2.0),  # 2500/2500 + 20/20 = 1 + 1
        (1020, 129, 2500, 20, 6.858),  # 0.408 + 6.45
        (0, 0, 2500, 20, 0.0),
        (5000, 10, 1000, 5, 7.0),  # 5 + 2
    ],
)
def test_service_time_table(inp: int, out: int, prefill: float, decode: float, expected: float) -> None:
    assert service_times_s(np.array([inp]), np.array([out]), prefill, decode)[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("t", "width", "count", "start"),
    [
        ([0, 100, 200, 300, 301, 700], 300, 4, 0.0),  # [0, 300] is closed: 0, 100, 200, 300
        ([0, 100, 200, 300.5, 301, 700], 300, 4, 100.0),  # [100, 400]: 100, 200, 300.5, 301
        ([5, 5, 5, 900], 300, 3, 5.0),  # equal times all count
        ([0, 1000, 2000], 300, 1, 0.0),
    ],
)
def test_busiest_window_table(t: list[float], width: float, count: int, start: float) -> None:
    assert busiest_window(np.array(t, dtype=float), width) == (count, start)


def test_offered_concurrency() -> None:
    assert offered_concurrency(390, 7.0) == pytest.approx(9.1)  # 390 / 300 s x 7 s


# --------------------------------------------------------------------------------- per-request traces
def test_compression_solves_for_the_widened_window_exactly() -> None:
    # One request every 10 s for an hour, 1 s of service each: the busiest closed 300 s window
    # holds 31 arrivals (0, 10, ..., 300) = 31/300 x 1 s = 0.1033 requests at once.
    src = _trace(np.arange(0, 3600, 10.0))
    # Target 0.5 x 2 slots = 1.0 at once -> K = 1.0 x 300 / 1 s = 300 arrivals in 300 s. The
    # narrowest stretch holding 300 arrivals is 299 x 10 = 2990 s, so f = 2990 / 300 = 9.9667.
    # Dividing once (1.0 / 0.1033 = 9.68) would be wrong: the window widens with f.
    out, f = scale_trace(src, peak_utilization=0.5, capacity_slots=2, prefill_tokens_per_s=2500, decode_tokens_per_s=20)
    assert f == pytest.approx(2990 / 300, rel=1e-8)
    assert busiest_window(out.t_s)[0] == 300
    ls = out.load_scale
    assert ls is not None and ls.method == "compress"
    assert ls.mean_service_s == 1.0
    assert ls.source_peak_offered == pytest.approx(31 / 300)
    assert ls.target_offered == 1.0
    assert ls.achieved_peak_offered == pytest.approx(1.0)
    assert len(out) == len(src)  # every request kept
    assert out.t_s[-1] == pytest.approx(3590 / f)
    assert out.span_s == pytest.approx((0.0, 3590 / f))
    assert src.t_s[-1] == 3590.0  # the source is left alone


def test_thinning_keeps_a_seeded_subset_and_hits_the_target_exactly() -> None:
    # One request per second for an hour, 1 s each: 301 arrivals in the busiest 300 s, offered
    # 301/300 = 1.0033. Target 0.25 x 2 = 0.5 -> K = 0.5 x 300 / 1 = 150 arrivals.
    src = _trace(np.arange(3600.0))
    kw = dict(peak_utilization=0.25, capacity_slots=2, prefill_tokens_per_s=2500, decode_tokens_per_s=20)
    out, f = scale_trace(src, seed=7, **kw)
    ls = out.load_scale
    assert ls is not None and ls.method == "thin"
    assert busiest_window(out.t_s)[0] == 150  # exactly K, not K in expectation
    assert ls.achieved_peak_offered == pytest.approx(0.5)
    assert 0.4 < f < 0.5  # the expectation 150/301 = 0.498; the busiest of many windows is noisier
    assert out.span_s == src.span_s  # the duration stays
    assert set(out.t_s.tolist()) <= set(src.t_s.tolist())
    # each request is kept iff its seeded uniform u_i <= f: about f of them
    assert len(out) == int((np.random.default_rng(7).random(3600) <= f).sum())
    again, f2 = scale_trace(src, seed=7, **kw)
    assert f2 == f and np.array_equal(again.t_s, out.t_s)
    other, _ = scale_trace(src, seed=8, **kw)
    assert not np.array_equal(other.t_s, out.t_s)


def test_factor_one_when_the_busiest_window_already_offers_the_target() -> None:
    # 301 arrivals in the busiest window x 1 s / 300 s = 1.00333 at once; target 0.5 x 2.00666 slots
    src = _trace(np.arange(3600.0))
    out, f = scale_trace(src, peak_utilization=0.5, capacity_slots=301 / 150, prefill_tokens_per_s=2500,
                         decode_tokens_per_s=20)
    assert f == 1.0 and out.load_scale is not None and out.load_scale.method == "none"
    assert np.array_equal(out.t_s, src.t_s)


def test_too_small_a_trace_cannot_reach_the_target() -> None:
    src = _trace([0.0, 10.0, 20.0])  # needs 0.5 x 18 x 300 / 1 s = 2700 arrivals in 300 s
    with pytest.raises(BadInput, match=r"synthetic\.csv: too few requests .* must hold 2700 arrivals .* has 3"):
        scale_trace(src, peak_utilization=0.5, **DEFAULTS)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_parameters_must_be_positive(bad: float) -> None:
    with pytest.raises(BadInput, match=r"peak_utilization: .* must be a number above 0"):
        scale_trace(_trace([0.0, 1.0]), peak_utilization=bad, **DEFAULTS)


@pytest.mark.parametrize(
    ("path", "peak", "method"),
    [
        (REAL / "azure-2023-conv" / "AzureLLMInferenceTrace_conv.csv", 0.5, "thin"),
        (REAL / "azure-2023-conv" / "AzureLLMInferenceTrace_conv.csv", 20.0, "compress"),
        (REAL / "mooncake-fast25-conversation" / "conversation_trace.jsonl", 0.5, "thin"),
        (REAL / "mooncake-fast25-conversation" / "conversation_trace.jsonl", 20.0, "compress"),
    ],
)
def test_real_traces_busiest_sliding_5_minutes_offer_the_target(path: Path, peak: float, method: str) -> None:
    src = load_trace(path)
    out, f = scale_trace(src, peak_utilization=peak, **DEFAULTS)
    ls = out.load_scale
    assert ls is not None and ls.method == method and ls.factor == f
    ms = float(service_times_s(src.input_tokens, src.output_tokens, 2500, 20).mean())
    assert ls.mean_service_s == pytest.approx(ms)
    # Measured independently: the most arrivals in any sliding 300 s window x mean service / 300.
    t = out.t_s
    most = max(int(np.searchsorted(t, x + 300.0, side="right")) - i for i, x in enumerate(t))
    target = peak * 18
    k = target * 300 / ms  # arrivals the busiest 300 s must hold, e.g. 9 x 300 / 21.945 = 123.03
    if method == "thin":
        assert most == math.ceil(k)  # one more kept request moves any window by at most 1
    else:
        # Compression moves whole groups of equal timestamps (Mooncake's are clumped at whole
        # seconds) into the window together, so it can overshoot by a group.
        biggest_tie = int(np.unique(src.t_s, return_counts=True)[1].max())
        assert math.ceil(k) <= most <= math.ceil(k) + biggest_tie - 1
        assert most / 300 * ms <= target * 1.005
    assert ls.achieved_peak_offered == pytest.approx(most / 300 * ms)
    assert ls.achieved_peak_offered >= target


# --------------------------------------------------------------------------------- ServeGen
def test_servegen_fixture_factor_from_summed_rates() -> None:
    rt = load_trace(FIX / "servegen_small")
    ms = float(service_times_s(length_table()[:, 0], length_table()[:, 1], 2500, 20).mean())
    assert ms == pytest.approx(10.8799016)  # mean of the shipped table at 2500/20 tokens/s
    # Busiest window: 4.0 requests/s (window 0) x 10.88 s = 43.52 at once; target 0.5 x 18 = 9
    # -> factor 9 / 43.52 = 0.2068.
    out, f = scale_trace(rt, peak_utilization=0.5, seed=3, **DEFAULTS)
    assert f == pytest.approx(9.0 / (4.0 * ms))
    ls = out.load_scale
    assert ls is not None and ls.method == "rates"
    assert ls.source_peak_offered == pytest.approx(4.0 * ms)
    assert ls.achieved_peak_offered == pytest.approx(9.0)
    assert ls.busiest_start_s == 0.0
    assert out.format == "servegen" and out.span_s == (0.0, 2400.0)
    assert out.gap_windows == [(1200.0, 1800.0)]
    assert not ((out.t_s >= 1200.0) & (out.t_s < 1800.0)).any()  # nothing in the gap
    assert np.all(np.diff(out.t_s) >= 0)
    # Token counts are pairs from the shipped table.
    pairs = {tuple(p) for p in length_table().tolist()}
    assert all((i, o) in pairs for i, o in zip(out.input_tokens.tolist(), out.output_tokens.tolist()))
    assert (out.session == -1).all() and out.prefix_blocks is None
    again, _ = scale_trace(rt, peak_utilization=0.5, seed=3, **DEFAULTS)
    assert np.array_equal(again.t_s, out.t_s) and np.array_equal(again.input_tokens, out.input_tokens)
    other, _ = scale_trace(rt, peak_utilization=0.5, seed=4, **DEFAULTS)
    assert not np.array_equal(other.t_s, out.t_s)


@pytest.mark.parametrize(("family", "shape"), [(POISSON, 0.0), (GAMMA, 0.5), (GAMMA, 4.0), (WEIBULL, 0.7)])
def test_drawn_counts_follow_the_scaled_rate(family: int, shape: float) -> None:
    # 2 requests/s x 0.5 x 600 s = 600 per window, 50 windows: 30,000 expected arrivals. A window
    # at rate 0 in the middle gets none.
    rate = np.full(50, 2.0)
    rate[20] = 0.0
    rt = _rate_trace(rate, family, shape)
    t = draw_arrivals(rt, 0.5, np.random.default_rng(0))
    assert len(t) == pytest.approx(49 * 600, rel=0.05)
    assert not ((t >= 20 * 600) & (t < 21 * 600)).any()
    assert t.min() >= 0 and t.max() < 50 * 600 and np.all(np.diff(t) >= 0)


def test_fitted_shape_is_kept_after_scaling() -> None:
    # Gamma shape 0.25 -> inter-arrival CV 1/sqrt(0.25) = 2; Poisson would give CV 1.
    rt = _rate_trace(np.full(20, 1.0), GAMMA, 0.25)
    iat = np.diff(draw_arrivals(rt, 0.1, np.random.default_rng(0)))  # 0.1 requests/s, ~1200 gaps
    assert np.mean(iat) == pytest.approx(10.0, rel=0.15)  # scale follows rate x factor
    assert np.std(iat) / np.mean(iat) == pytest.approx(2.0, rel=0.2)


def test_low_rate_client_is_not_piled_at_window_starts() -> None:
    # One Gamma(shape 0.5) client at 0.5 arrivals per 600 s window over 4,000 windows. Restarting
    # the draw at each window start puts the first arrival at a fresh draw X ~ Gamma(0.5, mean 1)
    # op-units in: P(X < 0.05 units = first 10% of the window) = P(chi2_1 < 0.05) = 0.18 of the
    # windows, i.e. about 0.3 of all arrivals in the first 10%. With the gap carried, arrivals
    # are spread evenly: about 0.10 in each tenth.
    rt = _rate_trace(np.full(4000, 0.5 / 600), GAMMA, 0.5)
    t = draw_arrivals(rt, 1.0, np.random.default_rng(1))
    assert len(t) == pytest.approx(2000, rel=0.15)
    offsets = (t % 600.0) / 600.0
    tenths = np.bincount((offsets * 10).astype(int), minlength=10) / len(t)
    assert tenths[0] < 0.15
    assert tenths.max() < 0.15 and tenths.min() > 0.05


def test_real_servegen_14_days_at_half_peak() -> None:
    rt = load_trace(REAL / "servegen-m-small")
    out, f = scale_trace(rt, peak_utilization=0.5, **DEFAULTS)
    ls = out.load_scale
    assert ls is not None
    # busiest 10-minute window sums to 3879.51 requests/s; x 10.88 s = 42,209 at once -> f = 2.132e-4
    assert float(rt.total_rate.max()) == pytest.approx(3879.508333)
    assert f == pytest.approx(9.0 / (3879.508333 * ls.mean_service_s))
    assert ls.achieved_peak_offered == pytest.approx(9.0)
    expected = float(rt.total_rate.sum()) * 600 * f  # 1.4206e9 requests x f = 302,900
    assert len(out) == pytest.approx(expected, rel=0.03)
    assert out.span_s == (0.0, 14 * 86400.0) and len(out.gap_windows) == 37
    gap_starts = np.array([a for a, _ in out.gap_windows])
    window_of = np.floor(out.t_s / 600.0) * 600.0
    assert not np.isin(window_of, gap_starts).any()
    # the daily cycle survives: the quietest hour of day (04-05 h) carries far less than 20-21 h
    hours = np.bincount(((out.t_s % 86400) // 3600).astype(int), minlength=24)
    assert hours[20] > 2 * hours[4]


# --------------------------------------------------------------------------------- token lengths
def test_shipped_length_table_is_the_documented_sample_of_the_azure_trace() -> None:
    azure = load_trace(REAL / "azure-2023-conv" / "AzureLLMInferenceTrace_conv.csv")
    pairs = derive_length_table(azure)
    assert pairs.shape == (4000, 2)
    shipped = (REPO / "autoscaler" / "sim" / "data" / "azure_conv_lengths.csv").read_text()
    assert shipped == format_length_table(pairs)
    assert np.array_equal(length_table(), pairs)
    head = shipped.split("input_tokens,output_tokens")[0]
    assert "CC-BY-4.0" in head and "Splitwise" in head and "ISCA'24" in head
    # the sample keeps the trace's shape: median input ~1,020 and output ~129 tokens
    assert math.isclose(np.median(pairs[:, 0]), 1020, rel_tol=0.05)
    assert math.isclose(np.median(pairs[:, 1]), 129, rel_tol=0.05)
