"""Replay a trace against the gateway (or one worker) as streaming OpenAI chat requests.

Each trace request becomes one ``POST /v1/chat/completions`` with ``stream: true``, one user
message whose text is about the trace's input length (4 characters a token, the emulator's rule)
and ``max_tokens`` = the trace's output length. Prompts share prefixes the way the trace says:

- Mooncake (``prefix_blocks``): each 512-token hash block becomes a fixed 2,048-character text,
  so two requests with the same leading blocks share that many characters of prompt.
- A trace with sessions (``session`` >= 0): a request starts with its session's previous prompt
  (cut to its own length when shorter), so a conversation's later turns extend the earlier ones.
- Otherwise each prompt is unique from its first character.

Bounds: it sends at most ``max_requests`` requests and none after ``max_seconds``; every request
is abandoned after ``request_timeout_s`` (``timeout``), and any request still open at
``max_seconds`` is cut then (``deadline``): ``max_seconds`` bounds the whole replay.

Outcomes: ``ok`` (the stream ended with ``data: [DONE]``) or a failure reason from a closed set:
``connect_error`` (no TCP connection), ``disconnected`` (the connection closed before a
response), ``http_<status>`` (a non-200 answer, e.g. ``http_503``), ``stream_cut`` (200, then
the stream ended before ``[DONE]``), ``stream_error`` (an SSE event carried an ``error``),
``timeout``, ``deadline`` (still open when ``max_seconds`` ran out). TTFT is from sending to the first event carrying content; percentiles are over the
``ok`` requests (numpy's linear interpolation).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import aiohttp
import numpy as np

from autoscaler.emulator.engine import CHARS_PER_TOKEN
from autoscaler.errors import BadInput, RuntimeFailure

MOONCAKE_BLOCK_TOKENS = 512
ROLE_OVERHEAD_CHARS = len("<user>")  # the emulator counts the role tag as prompt text
DEFAULT_CAPACITY_SLOTS = 18  # 3 groups x 6 requests, when no policy is given
FILLER = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing "
    "matches and a sphinx of black quartz reviews my vow; "
)


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    at_s: float  # seconds after the replay starts (already divided by the speed-up)
    prompt: str
    input_tokens: int
    output_tokens: int


@dataclass
class Outcome:
    index: int
    at_s: float
    ok: bool
    reason: str  # "ok" or a failure reason
    status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    detail: str = ""


@dataclass
class Summary:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    failures: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


# ----- prompts ---------------------------------------------------------------------------------
def _filler(chars: int, offset: int = 0) -> str:
    if chars <= 0:
        return ""
    reps = (offset + chars) // len(FILLER) + 1
    return (FILLER * reps)[offset : offset + chars]


def _block_text(block_id: int, cache: dict[int, str]) -> str:
    """The 2,048 characters (512 tokens) that stand for Mooncake hash block ``block_id``."""
    text = cache.get(block_id)
    if text is None:
        head = f"<block {block_id}> "
        text = head + _filler(MOONCAKE_BLOCK_TOKENS * CHARS_PER_TOKEN - len(head), block_id % len(FILLER))
        cache[block_id] = text
    return text


def content_chars(input_tokens: int) -> int:
    """Characters of message content that the emulator counts as ``input_tokens`` tokens."""
    return max(1, int(input_tokens) * CHARS_PER_TOKEN - ROLE_OVERHEAD_CHARS)


def build_prompts(input_tokens: Sequence[int], *, session: Sequence[int] | None = None,
                  prefix_blocks: Sequence[Sequence[int]] | None = None, seed: int = 0) -> list[str]:
    """One prompt text per request, in arrival order, sharing prefixes as the trace says."""
    prompts: list[str] = []
    last_by_session: dict[int, str] = {}
    blocks_cache: dict[int, str] = {}
    for i, n_in in enumerate(input_tokens):
        need = content_chars(n_in)
        unique = f"[request {i} seed {seed}] "
        if prefix_blocks is not None and len(prefix_blocks[i]):
            text = "".join(_block_text(int(b), blocks_cache) for b in prefix_blocks[i])
        elif session is not None and int(session[i]) >= 0 and int(session[i]) in last_by_session:
            text = last_by_session[int(session[i])] + " " + unique
        else:
            text = unique
        if len(text) < need:
            text += _filler(need - len(text), len(text) % len(FILLER))
        text = text[:need]
        if session is not None and int(session[i]) >= 0:
            last_by_session[int(session[i])] = text
        prompts.append(text)
    return prompts


def plan_requests(t_s: Sequence[float] | np.ndarray, input_tokens: Sequence[int] | np.ndarray,
                  output_tokens: Sequence[int] | np.ndarray, *,
                  session=None, prefix_blocks=None, speedup: float = 1.0, max_requests: int = 200,
                  max_seconds: float = 60.0, seed: int = 0) -> list[PlannedRequest]:
    """The requests to send: the trace's first ones that arrive within ``max_seconds`` of replay
    (replay time = (t - first t) / speedup), at most ``max_requests``."""
    t = np.asarray(t_s, dtype=float)
    if t.size == 0:
        return []
    at = (t - t[0]) / speedup
    n = min(max_requests, int(np.searchsorted(at, max_seconds, side="right")))
    prompts = build_prompts(
        [int(x) for x in input_tokens[:n]],
        session=None if session is None else [int(x) for x in session[:n]],
        prefix_blocks=None if prefix_blocks is None else prefix_blocks[:n],
        seed=seed,
    )
    return [PlannedRequest(i, float(at[i]), prompts[i], int(input_tokens[i]), max(1, int(output_tokens[i])))
            for i in range(n)]


# ----- sending ---------------------------------------------------------------------------------
async def _one(session: aiohttp.ClientSession, url: str, model: str, req: PlannedRequest,
               timeout_s: float, started: float, left_s: float | None = None) -> Outcome:
    """One request. ``left_s``: time left of the whole run; a request still open then is cut
    with reason ``deadline`` (``timeout`` when its own ``timeout_s`` comes first)."""
    cut_by_deadline = left_s is not None and left_s < timeout_s
    if left_s is not None and cut_by_deadline:
        timeout_s = max(0.0, left_s)
    body = {"model": model, "messages": [{"role": "user", "content": req.prompt}],
            "max_tokens": req.output_tokens, "stream": True}
    t0 = time.monotonic()
    out = Outcome(req.index, round(t0 - started, 3), ok=False, reason="timeout")
    got_headers = False
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, json=body) as resp:
                got_headers = True
                out.status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(300)).decode(errors="replace")
                    out.reason, out.detail = f"http_{resp.status}", text.strip()[:200]
                    return out
                done = False
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    try:
                        event = json.loads(data)
                    except ValueError:
                        out.reason, out.detail = "stream_error", f"not JSON: {data[:100]!r}"
                        return out
                    if isinstance(event, dict) and event.get("error"):
                        out.reason, out.detail = "stream_error", json.dumps(event["error"])[:200]
                        return out
                    if out.ttft_s is None and _has_content(event):
                        out.ttft_s = time.monotonic() - t0
                if not done:
                    out.reason = "stream_cut"
                    return out
                out.ok, out.reason = True, "ok"
                out.e2e_s = time.monotonic() - t0
                return out
    except TimeoutError:
        out.reason = "deadline" if cut_by_deadline else "timeout"
    except aiohttp.ClientConnectorError as exc:
        out.reason, out.detail = "connect_error", str(exc)[:200]
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
        out.reason = "stream_cut" if got_headers else "disconnected"
        out.detail = f"{type(exc).__name__}: {exc}"[:200]
    except aiohttp.ClientError as exc:
        out.reason = "stream_cut" if got_headers else "disconnected"
        out.detail = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _has_content(event) -> bool:
    if not isinstance(event, dict):
        return False
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text"):
            return True
    return False


async def replay(target: str, plan: Sequence[PlannedRequest], *, model: str = "MiniMaxAI/MiniMax-M2.5",
                 max_seconds: float = 60.0, request_timeout_s: float = 120.0, concurrency_limit: int = 512,
                 progress: Callable[[str], None] | None = None, progress_every_s: float = 5.0,
                 bound_whole_run: bool = False) -> list[Outcome]:
    """Send ``plan`` on its schedule; returns one Outcome per request sent, in plan order.

    Nothing is sent after ``max_seconds``. With ``bound_whole_run`` (``autoscaler emulate load``)
    ``max_seconds`` also bounds the whole replay: a request still open then is cut (``deadline``);
    without it (the demo) the requests sent finish or time out by themselves."""
    url = target.rstrip("/") + "/v1/chat/completions"
    limit = asyncio.Semaphore(concurrency_limit)
    outcomes: list[Outcome] = []
    connector = aiohttp.TCPConnector(limit=concurrency_limit, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, request_timeout_s))
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    t0 = loop.time()
    tasks: list[asyncio.Task] = []

    async def run(req: PlannedRequest) -> None:
        try:
            left = max_seconds - (loop.time() - t0) if bound_whole_run else None  # of the whole run
            outcomes.append(await _one(session, url, model, req, request_timeout_s, started, left))
        finally:
            limit.release()

    async def report(progress: Callable[[str], None]) -> None:
        while True:
            await asyncio.sleep(progress_every_s)
            ok = sum(o.ok for o in outcomes)
            progress(f"emulate load: {time.monotonic() - started:.0f} s: sent {len(tasks)}, "
                     f"done {len(outcomes)} (ok {ok}, failed {len(outcomes) - ok})")

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        reporter = loop.create_task(report(progress)) if progress else None
        try:
            for req in plan:
                if req.at_s > max_seconds:
                    break
                delay = t0 + req.at_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if limit.locked():  # --concurrency-limit reached: wait for a request to end
                    await limit.acquire()
                    if loop.time() - t0 > max_seconds:  # waited past the bound: send no more
                        limit.release()
                        break
                else:
                    await limit.acquire()
                tasks.append(loop.create_task(run(req)))
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            if reporter:
                reporter.cancel()
            for t in tasks:
                t.cancel()
    outcomes.sort(key=lambda o: o.index)
    return outcomes


def summarize(outcomes: Sequence[Outcome]) -> Summary:
    s = Summary(sent=len(outcomes))
    ttfts = [o.ttft_s for o in outcomes if o.ok and o.ttft_s is not None]
    for o in outcomes:
        if o.ok:
            s.ok += 1
        else:
            s.failed += 1
            s.failures[o.reason] = s.failures.get(o.reason, 0) + 1
    if ttfts:
        s.ttft_p50_s = round(float(np.percentile(ttfts, 50)), 4)
        s.ttft_p99_s = round(float(np.percentile(ttfts, 99)), 4)
    return s


# ----- the command -----------------------------------------------------------------------------
def _capacity(args) -> tuple[int, float, float]:
    """(capacity slots, prefill tokens/s, decode tokens/s): from --policy, else 18, 2500, 20."""
    if not args.policy:
        return DEFAULT_CAPACITY_SLOTS, 2500.0, 20.0
    from autoscaler.policy.loader import load_policy

    policy = load_policy(args.policy).policy
    return (policy.fleet.ceiling_groups * policy.fleet.requests_per_group,
            float(policy.simulation.prefill_tokens_per_s), float(policy.simulation.decode_tokens_per_s))


def load_plan(args, say: Callable[[str], None]) -> list[PlannedRequest]:
    from autoscaler.sim.traces import RateTrace, load_trace

    start_at = None
    if args.start_at:
        from datetime import datetime, timezone

        try:
            start_at = datetime.fromisoformat(args.start_at)
        except ValueError as exc:
            raise BadInput(f"--start-at: {args.start_at!r} is not an ISO 8601 time") from exc
        if start_at.tzinfo is None:
            start_at = start_at.replace(tzinfo=timezone.utc)
    trace = load_trace(args.trace, args.trace_format, start_at=start_at)
    if args.peak_utilization is not None:
        from autoscaler.sim.loadscale import scale_trace

        slots, prefill, decode = _capacity(args)
        # The replay divides every time by --speedup, which multiplies the arrival rate by it; the
        # workers serve at their own speed. So the trace is scaled to U / X at real time, and the
        # replay at X times the speed offers U: at 1.1 and 20x, 0.055 of the slots, then x 20 = 1.1
        # (scaling to U itself offered X x U = 22 times the fleet).
        # (No backtest's "kept only N requests" warning: a replay sends what its bounds allow anyway.)
        trace, factor = scale_trace(trace, peak_utilization=args.peak_utilization / args.speedup,
                                    capacity_slots=slots, prefill_tokens_per_s=prefill, decode_tokens_per_s=decode,
                                    seed=args.seed, warn_few=args.speedup == 1)
        say(f"emulate load: load scale {factor:.4g} for peak utilization {args.peak_utilization} "
            f"of {slots} slots" + (f" at {args.speedup:g}x speed ({len(trace.t_s):,} requests kept)"
                                   if args.speedup != 1 else ""))
    elif isinstance(trace, RateTrace):
        raise BadInput(f"{args.trace}: a ServeGen trace holds rates, not requests: "
                       "give --peak-utilization to draw requests at a rate this fleet can take")
    return plan_requests(trace.t_s, trace.input_tokens, trace.output_tokens, session=trace.session,
                         prefix_blocks=trace.prefix_blocks, speedup=args.speedup,
                         max_requests=args.max_requests, max_seconds=args.max_seconds, seed=args.seed)


def run_load_command(args) -> dict:
    """``autoscaler emulate load``: returns the summary dict (the CLI prints it)."""

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.max_requests < 1:
        raise BadInput(f"--max-requests: must be at least 1, got {args.max_requests}")
    if args.seed < 0:
        raise BadInput(f"--seed: {args.seed} is negative; a seed is a whole number, 0 or more")
    for name in ("max_seconds", "speedup"):
        if not getattr(args, name) > 0:
            raise BadInput(f"--{name.replace('_', '-')}: must be above 0, got {getattr(args, name)}")
    if args.peak_utilization is not None and not 0.01 <= args.peak_utilization <= 10:
        raise BadInput(f"--peak-utilization: {args.peak_utilization:g} must be from 0.01 to 10")
    if args.concurrency_limit < 1:
        raise BadInput(f"--concurrency-limit: must be at least 1, got {args.concurrency_limit}")
    request_timeout = args.request_timeout_s if args.request_timeout_s is not None else 120.0
    if not request_timeout > 0:
        raise BadInput(f"--request-timeout-s: must be above 0, got {request_timeout}")
    from autoscaler.settings import check_http_url

    args.target = check_http_url("--target", args.target, "http://127.0.0.1:30000")
    from autoscaler.cli.common import check_output

    check_output("--outcomes", args.outcomes)  # before any work or request
    plan = load_plan(args, say)
    say(f"emulate load: replaying {len(plan)} request(s) against {args.target}")
    _check_reachable(args.target)
    outcomes = asyncio.run(replay(args.target, plan, model=args.model, max_seconds=args.max_seconds,
                                  request_timeout_s=request_timeout, concurrency_limit=args.concurrency_limit,
                                  progress=say, bound_whole_run=True))
    if args.outcomes:
        try:
            with open(args.outcomes, "w", encoding="utf-8") as f:
                for o in outcomes:
                    f.write(json.dumps(asdict(o)) + "\n")
        except OSError as exc:  # checked before the run: the disk failed in between
            raise RuntimeFailure(f"--outcomes: cannot write {args.outcomes}: {exc.strerror or exc}") from exc
    return summarize(outcomes).to_json()


def _check_reachable(target: str) -> None:
    """A target that refuses connections is a runtime failure (exit 1), not 200 failed requests."""
    import httpx

    try:
        httpx.get(target.rstrip("/") + "/v1/models", timeout=5.0)
    except httpx.HTTPError as exc:
        raise RuntimeFailure(f"--target {target}: unreachable: {exc}") from exc
