"""Load scale: fit a recorded trace to this fleet (docs/interfaces.md, "The backtest's definitions").

The load scale is a multiplier on the arrival rate, chosen so that the busiest 5 minutes
(sliding window) offer ``peak_utilization x capacity_slots`` concurrent requests, where

    service time of a request  = input_tokens / prefill_tokens_per_s + output_tokens / decode_tokens_per_s
    mean service time          = the average service time over the whole (unscaled) trace
    offered concurrency        = arrival rate x mean service time
    busiest 5 minutes          = the most arrivals in any closed window [t, t + 300 s]

Per-request traces are thinned (factor < 1: each request kept with probability factor, seeded)
or compressed (factor > 1: times divided by the factor, solved exactly because the 300 s window
then covers 300 x factor s of the original). ServeGen rates are multiplied by the factor and
arrivals drawn per client from the fitted inter-arrival family. docs/traces.md has the worked
equations, the token-length table and measured timings.
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from autoscaler.errors import BadInput
from autoscaler.sim.traces import GAMMA, POISSON, WEIBULL, RateTrace, Trace

log = logging.getLogger("autoscaler.sim.loadscale")

BUSIEST_WINDOW_S = 300.0  # "the busiest 5 minutes"
LENGTH_TABLE = "azure_conv_lengths.csv"  # in autoscaler/sim/data/
LENGTH_TABLE_ROWS = 4000
LENGTH_TABLE_SEED = 0
# The compression factor is raised by this relative margin so the K arrivals that must fit in
# 300 s still do after floating-point division (300 s x 1e-9 = 0.3 us).
_COMPRESS_MARGIN = 1e-9


@dataclass(frozen=True)
class LoadScale:
    """How a trace was scaled, for reporting (``simulate --json`` "load_scale" is ``factor``)."""

    factor: float  # multiplier on the arrival rate
    method: str  # "none" | "thin" | "compress" | "rates" (ServeGen)
    mean_service_s: float  # mean service time of the unscaled trace (ServeGen: of the length table)
    target_offered: float  # peak_utilization x capacity_slots
    source_peak_offered: float  # busiest 5 minutes of the unscaled trace
    achieved_peak_offered: float  # busiest 5 minutes after scaling, as the definition measures it
    drawn_peak_offered: float  # busiest 5 minutes counted on the arrivals produced
    busiest_start_s: float  # start of the busiest window after scaling (seconds since start)
    seed: int


# --------------------------------------------------------------------------------- measures
def service_times_s(
    input_tokens: np.ndarray, output_tokens: np.ndarray, prefill_tokens_per_s: float, decode_tokens_per_s: float
) -> np.ndarray:
    """Per-request service time: all input tokens at the prefill speed, then the output at the decode speed."""
    return np.asarray(input_tokens, dtype=np.float64) / prefill_tokens_per_s + np.asarray(
        output_tokens, dtype=np.float64
    ) / decode_tokens_per_s


def busiest_window(t_s: np.ndarray, width_s: float = BUSIEST_WINDOW_S) -> tuple[int, float]:
    """(most arrivals in any closed window [t, t + width_s], that window's start).

    The busiest window can always be slid to start on an arrival, so only those starts are tried.
    """
    t = np.asarray(t_s, dtype=np.float64)
    if t.size == 0:
        return 0, 0.0
    ends = np.searchsorted(t, t + width_s, side="right")
    counts = ends - np.arange(t.size)
    i = int(np.argmax(counts))
    return int(counts[i]), float(t[i])


def offered_concurrency(arrivals: float, mean_service_s: float, width_s: float = BUSIEST_WINDOW_S) -> float:
    """Arrival rate x mean service time, e.g. 390 arrivals in 300 s x 7 s = 9.1 requests at once."""
    return arrivals / width_s * mean_service_s


# --------------------------------------------------------------------------------- token lengths
def derive_length_table(azure: Trace, n: int = LENGTH_TABLE_ROWS, seed: int = LENGTH_TABLE_SEED) -> np.ndarray:
    """(n, 2) int64 (input, output) pairs: a uniform sample without replacement, in trace order.

    This is how autoscaler/sim/data/azure_conv_lengths.csv was made from the vendored Azure
    conversation trace; tests/test_loadscale.py checks the shipped file against it.
    """
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(azure), size=min(n, len(azure)), replace=False))
    return np.column_stack([azure.input_tokens[idx], azure.output_tokens[idx]]).astype(np.int64)


def format_length_table(pairs: np.ndarray) -> str:
    """The shipped file's text: a header comment naming the source and licence, then the pairs."""
    head = (
        f"# {len(pairs)} (input_tokens, output_tokens) pairs sampled uniformly without replacement\n"
        "# (numpy default_rng(0), kept in trace order) from the Azure LLM inference trace 2023,\n"
        "# conversation service: Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv,\n"
        "# vendored in examples/traces/azure-2023-conv/. Licence CC-BY-4.0. Source: Patel et al.,\n"
        "# \"Splitwise: Efficient Generative LLM Inference Using Phase Splitting\", ISCA'24.\n"
        "# Used to give ServeGen arrivals token counts (docs/traces.md). Rebuild with\n"
        "# autoscaler.sim.loadscale.derive_length_table + format_length_table.\n"
        "input_tokens,output_tokens\n"
    )
    return head + "".join(f"{int(i)},{int(o)}\n" for i, o in pairs)


@functools.lru_cache(maxsize=1)
def length_table() -> np.ndarray:
    """The shipped (input, output) token pairs, (n, 2) int64, read once."""
    text = resources.files("autoscaler.sim").joinpath("data", LENGTH_TABLE).read_text(encoding="utf-8")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].startswith("#")]
    if not rows or rows[0] != ["input_tokens", "output_tokens"]:
        raise RuntimeError(f"{LENGTH_TABLE}: header input_tokens,output_tokens missing")  # a packaging bug
    table = np.array(rows[1:], dtype=np.int64)
    table.setflags(write=False)
    return table


# --------------------------------------------------------------------------------- scaling
def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise BadInput(f"{name}: {v!r} must be a number above 0")


def scale_trace(
    src: Trace | RateTrace,
    *,
    peak_utilization: float,
    capacity_slots: int,
    prefill_tokens_per_s: float,
    decode_tokens_per_s: float,
    seed: int = 0,
    warn_few: bool = True,
) -> tuple[Trace, float]:
    """Scale ``src`` so its busiest sliding 5 minutes offer peak_utilization x capacity_slots.

    Returns (scaled trace, factor). The scaled trace's ``load_scale`` holds the mean service
    time and the offered concurrency before and after. A RateTrace (ServeGen) comes back as a
    Trace with drawn arrivals and token counts. Raises BadInput for non-positive parameters and
    for a trace too small to reach the target at any compression.
    """
    _check_positive(
        peak_utilization=peak_utilization,
        capacity_slots=capacity_slots,
        prefill_tokens_per_s=prefill_tokens_per_s,
        decode_tokens_per_s=decode_tokens_per_s,
    )
    target = float(peak_utilization) * float(capacity_slots)
    if isinstance(src, RateTrace):
        scaled, factor = _scale_rates(src, target, prefill_tokens_per_s, decode_tokens_per_s, seed)
    else:
        scaled, factor = _scale_requests(src, target, prefill_tokens_per_s, decode_tokens_per_s, seed)
    if warn_few:
        warn_if_few(scaled, factor, src)
    return scaled, factor


# Fewer requests than this after scaling: the replay's figures rest on a handful of requests.
FEW_REQUESTS = 200


def warn_if_few(scaled: Trace, factor: float, src: Trace | RateTrace) -> None:
    """A loud warning (stderr) when load scaling keeps only a handful of requests."""
    kept = len(scaled)
    if kept >= FEW_REQUESTS:
        return
    of = f" of {len(src):,}" if isinstance(src, Trace) else ""
    log.warning(
        "WARNING: load scaling kept only %s%s requests (scale x%.3g): every figure of this backtest rests on "
        "them. A fleet this large for this trace needs a higher --peak-utilization, or the trace holds an "
        "outlier (one request with a huge token count lowers the scale of all)", f"{kept:,}", of, factor)


def scale_for_policy(src: Trace | RateTrace, policy, peak_utilization: float, seed: int = 0,
                     warn_few: bool = True) -> tuple[Trace, float]:
    """``scale_trace`` with the fleet and the speeds a policy gives (ceiling x requests per group slots).
    ``warn_few=False`` for a caller that keeps few requests on purpose (the demo's few minutes)."""
    return scale_trace(
        src,
        peak_utilization=peak_utilization,
        capacity_slots=policy.fleet.ceiling_groups * policy.fleet.requests_per_group,
        prefill_tokens_per_s=policy.simulation.prefill_tokens_per_s,
        decode_tokens_per_s=policy.simulation.decode_tokens_per_s,
        seed=seed,
        warn_few=warn_few,
    )


def _scale_requests(src: Trace, target: float, prefill: float, decode: float, seed: int) -> tuple[Trace, float]:
    ms = float(service_times_s(src.input_tokens, src.output_tokens, prefill, decode).mean())
    if ms <= 0:
        raise BadInput(f"{src.path}: every request has 0 tokens; the load scale is undefined")
    peak_n, _ = busiest_window(src.t_s)
    source_peak = offered_concurrency(peak_n, ms)
    # Arrivals the busiest 300 s must hold: K = target x 300 / mean service,
    # e.g. 9 requests at once x 300 s / 11.02 s = 245.0 arrivals.
    k_needed = target * BUSIEST_WINDOW_S / ms

    if peak_n == math.ceil(k_needed - 1e-9):
        method, factor, out = "none", 1.0, src.select(np.ones(len(src), dtype=bool))
    elif peak_n > k_needed:
        # Thin: request i draws u_i from the seeded generator and is kept iff u_i <= factor, so
        # each is kept with probability factor and the duration stays. The factor is solved on
        # that draw: the smallest at which the busiest window of the kept requests holds
        # K' = ceil(K) arrivals. (K / peak_n, the expectation, overshoots by the noise of the
        # busiest window: +10% on Mooncake at 0.5.) Keeping one more request raises any
        # window's count by at most 1, so the count of the j lowest u's hits K' exactly.
        method = "thin"
        k_int = math.ceil(k_needed - 1e-9)
        u = np.random.default_rng(seed).random(len(src))
        by_u = np.argsort(u, kind="stable")

        def busiest_of_lowest(j: int) -> int:
            return busiest_window(src.t_s[np.sort(by_u[:j])])[0]

        lo, hi = 1, len(src)  # busiest_of_lowest(len(src)) = peak_n >= k_int
        while lo < hi:
            mid = (lo + hi) // 2
            if busiest_of_lowest(mid) >= k_int:
                hi = mid
            else:
                lo = mid + 1
        factor = float(u[by_u[lo - 1]])
        out = src.select(u <= factor)
    else:
        # Compress: with times divided by f the 300 s window covers 300 f s of the original, so
        # solve N(f) >= K exactly: the narrowest original stretch holding K' = ceil(K) arrivals is
        # d = min_i (t[i+K'-1] - t[i]); f = d / 300 fits exactly those K' arrivals in 300 s.
        k_int = math.ceil(k_needed - 1e-9)
        if k_int > len(src):
            raise BadInput(
                f"{src.path}: too few requests for peak utilisation: the busiest 5 minutes must hold "
                f"{k_int} arrivals (at a mean service time of {ms:.3g} s) but the trace has {len(src)}"
            )
        t = src.t_s
        d = float(np.min(t[k_int - 1 :] - t[: len(t) - k_int + 1]))
        method, factor = "compress", d / BUSIEST_WINDOW_S * (1 + _COMPRESS_MARGIN)
        s0, s1 = src.span_s
        out = src.select(np.ones(len(src), dtype=bool))
        out.t_s = s0 + (src.t_s - s0) / factor  # compress around the trace's first arrival
        out.span_s = (s0, s0 + (s1 - s0) / factor)

    n_after, start_after = busiest_window(out.t_s)
    achieved = offered_concurrency(n_after, ms)
    out.load_scale = LoadScale(
        factor=factor,
        method=method,
        mean_service_s=ms,
        target_offered=target,
        source_peak_offered=source_peak,
        achieved_peak_offered=achieved,
        drawn_peak_offered=achieved,
        busiest_start_s=start_after,
        seed=seed,
    )
    return out, factor


def _scale_rates(src: RateTrace, target: float, prefill: float, decode: float, seed: int) -> tuple[Trace, float]:
    lengths = length_table()
    ms = float(service_times_s(lengths[:, 0], lengths[:, 1], prefill, decode).mean())
    # Rates are constant within a 600 s window, so the busiest sliding 300 s window sits inside
    # the busiest window: its offered concurrency is that window's summed rate x mean service.
    total = src.total_rate
    w_peak = int(np.argmax(total))
    source_peak = float(total[w_peak]) * ms
    factor = target / source_peak
    out = draw_rate_trace(src, factor, seed)
    t = out.t_s
    drawn_n, _ = busiest_window(t)
    out.load_scale = LoadScale(
        factor=factor,
        method="rates",
        mean_service_s=ms,
        target_offered=target,
        source_peak_offered=source_peak,
        achieved_peak_offered=float((src.rate[:, w_peak] * factor).sum()) * ms,
        drawn_peak_offered=offered_concurrency(drawn_n, ms),
        busiest_start_s=float(src.window_start_s[w_peak]),
        seed=seed,
    )
    return out, factor


def draw_rate_trace(src: RateTrace, factor: float, seed: int) -> Trace:
    """One draw of a ServeGen trace at load scale ``factor``: arrivals from each client's fitted
    family (``draw_arrivals``), then each request's lengths from the length table, both from one
    generator seeded ``seed``. The same (src, factor, seed) always gives the same requests; the
    rate oracle (docs/interfaces.md) replays other seeds of it. ``rate_source`` keeps ``src``."""
    lengths = length_table()
    rng = np.random.default_rng(seed)
    t = draw_arrivals(src, factor, rng)
    if t.size == 0:
        raise BadInput(f"{src.path}: load scale {factor:.3g} draws no request")
    pick = rng.integers(0, lengths.shape[0], size=t.size)
    return Trace(
        format=src.format,
        path=src.path,
        start_epoch_s=src.start_epoch_s,
        t_s=t,
        input_tokens=lengths[pick, 0].copy(),
        output_tokens=lengths[pick, 1].copy(),
        session=np.full(t.size, -1, dtype=np.int64),
        prefix_blocks=None,
        span_s=src.span_s,
        requests_read=src.requests_read,
        bad_rows=src.bad_rows,
        gap_windows=list(src.gap_windows),
        rate_source=src,
    )


# --------------------------------------------------------------------------------- ServeGen arrivals
def _unit_mean_divisor(family: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """What to divide a standard draw by so it has mean 1 with the fitted shape kept.

    Gamma(k, scale 1/k) and Weibull(k, scale 1/G(1+1/k)) have mean 1 and the fitted shape, so
    the fitted CV; the exponential already has mean 1. Dividing a unit-mean draw by the
    client's scaled rate gives seconds: the scale follows the rate, divided by the factor.
    """
    div = np.ones(shape.shape)
    g = (family == GAMMA) & (shape > 0)
    wb = (family == WEIBULL) & (shape > 0)
    div[g] = shape[g]
    div[wb] = np.exp(np.array([math.lgamma(1.0 + 1.0 / k) for k in shape[wb].tolist()]))
    return div


def _unit_mean_draws(rng: np.random.Generator, family: np.ndarray, shape: np.ndarray, divisor: np.ndarray,
                     n: np.ndarray) -> np.ndarray:
    """n[i] unit-mean draws for each entry i, laid out entry after entry.

    The entries must be ordered by family (GAMMA, WEIBULL, POISSON) so each family's draws are
    one contiguous block made by one numpy call.
    """
    parts = []
    for fam in (GAMMA, WEIBULL, POISSON):
        sel = family == fam
        if not sel.any():
            continue
        k = np.repeat(shape[sel], n[sel])
        if fam == GAMMA:
            raw = rng.standard_gamma(k)
        elif fam == WEIBULL:
            raw = rng.weibull(k)
        else:
            raw = rng.standard_exponential(k.size)
        parts.append(raw / np.repeat(divisor[sel], n[sel]))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


_FAMILY_ORDER = np.array([2, 0, 1])  # sort key by family code: GAMMA(1) -> 0, WEIBULL(2) -> 1, POISSON(0) -> 2


def draw_arrivals(src: RateTrace, factor: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times (s since start) of all clients, rates multiplied by ``factor``.

    Each client is a renewal process run in operational time (1 unit = 1 expected arrival):
    window w of client c lasts m = rate x factor x 600 units and maps linearly onto its 600 s.
    Inter-arrival times are unit-mean draws of the client's family and shape in the window
    where the previous arrival fell. The pending arrival carries across window boundaries (and
    across windows with rate 0, which last 0 units), so nothing piles at a window's start.
    """
    n_clients, n_windows = src.rate.shape
    lam = src.rate * factor  # requests/s after scaling
    units = lam * src.window_s  # expected arrivals per client-window
    family = src.family.astype(np.int64)
    shape = src.shape
    divisor = _unit_mean_divisor(family, shape)
    active = units > 0
    order_key = _FAMILY_ORDER[family]

    # Start each client at a uniform point of one inter-arrival draw (a cheap stand-in for the
    # renewal process's stationary start), taken from its first active window's family.
    first = np.argmax(active, axis=1)
    rows = np.arange(n_clients)
    f0, k0, d0 = family[rows, first], shape[rows, first], divisor[rows, first]
    o0 = np.argsort(_FAMILY_ORDER[f0], kind="stable")
    x0 = np.empty(n_clients)
    x0[o0] = _unit_mean_draws(rng, f0[o0], k0[o0], d0[o0], np.ones(n_clients, dtype=np.int64))
    pending = rng.random(n_clients) * x0  # operational time of each client's next arrival
    clock = np.zeros(n_clients)  # operational time at the current window's start

    chunks: list[np.ndarray] = []
    for w in np.flatnonzero(active.any(axis=0)):
        cl = np.flatnonzero(active[:, w])
        cl = cl[np.argsort(order_key[cl, w], kind="stable")]  # families in contiguous blocks
        start = clock[cl]
        end = start + units[cl, w]
        p = pending[cl]
        fam_w, shape_w, div_w, lam_w = family[cl, w], shape[cl, w], divisor[cl, w], lam[cl, w]
        t0 = src.window_start_s[w]
        ci = np.flatnonzero(p < end)  # clients with an arrival inside this window
        while ci.size:
            # Enough draws to cross the window end most of the time; another round tops up.
            n = (np.ceil((end[ci] - p[ci]) * 1.5) + 8).astype(np.int64)
            seg_start = np.cumsum(n) - n
            cs = np.cumsum(_unit_mean_draws(rng, fam_w[ci], shape_w[ci], div_w[ci], n))
            before = np.concatenate(([0.0], cs[seg_start[1:] - 1]))  # sum of earlier segments
            # Candidates c_1..c_n = p + partial sums; c_0 = p is an arrival (p < end).
            cand = np.repeat(p[ci] - before, n) + cs
            below = np.add.reduceat(cand < np.repeat(end[ci], n), seg_start)
            k_rec = np.minimum(below, n - 1)  # c_1..c_k are arrivals; c_{k+1} is the next pending
            rec = (np.arange(cand.size) - np.repeat(seg_start, n)) < np.repeat(k_rec, n)
            who = np.concatenate((ci, np.repeat(ci, k_rec)))
            op = np.concatenate((p[ci], cand[rec]))
            chunks.append(t0 + (op - start[who]) / lam_w[who])
            p[ci] = cand[seg_start + k_rec]
            ci = ci[p[ci] < end[ci]]
        pending[cl] = p
        clock[cl] = end
    if not chunks:
        return np.zeros(0)
    t = np.concatenate(chunks)
    t.sort()
    return t


__all__ = [
    "BUSIEST_WINDOW_S",
    "LoadScale",
    "busiest_window",
    "derive_length_table",
    "draw_arrivals",
    "draw_rate_trace",
    "format_length_table",
    "length_table",
    "offered_concurrency",
    "scale_trace",
    "service_times_s",
]
