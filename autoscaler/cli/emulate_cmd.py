"""``autoscaler emulate worker|load``: an SGLang group emulator and a trace replayer (docs/emulator.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from autoscaler.errors import BadInput


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="run a process that behaves like an SGLang group, or replay a trace",
        description="Emulate an SGLang TP=2 group (worker) or replay a trace against a gateway (load).",
    )
    sub = p.add_subparsers(dest="emulate_command", metavar="WHAT", parser_class=type(p))
    sub.required = True

    w = sub.add_parser("worker", help="serve like one SGLang TP=2 group (health, OpenAI API, /metrics)")
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    w.add_argument("--port", type=int, required=True, help="port to listen on (0: any free port, printed on stderr)")
    w.add_argument("--max-running", type=int, default=6, help="requests served at once; the rest queue FIFO (default 6)")
    w.add_argument("--startup-s", type=float, default=0.0, help="seconds /health answers 503 after start (default 0)")
    w.add_argument("--prefill-tokens-per-s", type=float, default=2500.0, help="per-request prefill speed (default 2500)")
    w.add_argument("--decode-tokens-per-s", type=float, default=20.0, help="per-request decode speed (default 20)")
    w.add_argument("--kv-capacity-tokens", type=int, default=160_000, help="KV cache size for token_usage (default 160000)")
    w.add_argument("--prefix-cache-tokens", type=int, default=None,
                   help="prefix cache size in tokens, LRU (default: --kv-capacity-tokens)")
    w.add_argument("--min-chunk-interval-s", type=float, default=0.05,
                   help="streamed chunks are at least this far apart; tokens due meanwhile go together (default 0.05)")
    w.add_argument("--model-name", default="MiniMaxAI/MiniMax-M2.5", help="model name in info, /v1/models and metric labels")
    w.add_argument("--metric-prefix", default="sglang:", help="prefix of every metric name (default sglang:)")
    w.add_argument("--owner", default="", help="who started it, reported by GET /_emulator/state (the local "
                   "actuator passes its ledger's fleet id, so it never takes another fleet's worker for its own)")
    w.add_argument("--explicit-timestamps", action="store_true",
                   help="stamp every /metrics sample with the time it was served (then the 'frozen' "
                        "fault leaves stale series in Prometheus instead of absent ones)")
    w.set_defaults(func=_run_worker)

    ld = sub.add_parser("load", help="replay a trace against a gateway or worker (OpenAI streaming chat)")
    ld.set_defaults(func=_run_load)
    _load_arguments(ld)


def _load_arguments(ld: argparse.ArgumentParser) -> None:
    ld.add_argument("--target", required=True, help="base URL of the gateway or worker, e.g. http://127.0.0.1:30000")
    ld.add_argument("--trace", required=True, help="trace file (Mooncake JSONL, Azure CSV, ...)")
    ld.add_argument("--trace-format", default="auto", choices=("auto", "azure", "mooncake", "servegen", "csv"),
                    help="the trace's format: auto, azure, mooncake, servegen, csv (default auto)")
    ld.add_argument("--start-at", default=None, help="absolute start of a trace without times (ISO 8601)")
    ld.add_argument("--peak-utilization", type=float, default=None,
                    help="scale the arrival rate so the busiest 5 minutes offer this share of the fleet's slots")
    ld.add_argument("--policy", default=None, help="policy file: fleet size and speeds for --peak-utilization")
    ld.add_argument("--speedup", type=float, default=1.0, help="replay this many times faster than real time (default 1)")
    ld.add_argument("--max-requests", type=int, default=200, help="send at most this many requests (default 200)")
    ld.add_argument("--max-seconds", type=float, default=60.0,
                    help="bound on the whole run: no request is sent after it, and requests still open then "
                         "are cut and counted as 'deadline' (default 60)")
    ld.add_argument("--request-timeout-s", type=float, default=None,
                    help="a request still open after this long is a timeout (default 120)")
    ld.add_argument("--concurrency-limit", type=int, default=512, help="most requests open at once (default 512)")
    ld.add_argument("--model", default="MiniMaxAI/MiniMax-M2.5", help="model field of each request")
    ld.add_argument("--seed", type=int, default=0, help="seed for load scaling and prompt text, 0 or more (default 0)")
    ld.add_argument("--outcomes", default=None, metavar="FILE",
                    help="write every request's outcome (reason, status, TTFT) to FILE as JSON lines")
    ld.add_argument("--json", action="store_true", help="print one JSON summary on stdout, nothing else")


def _run_worker(args: argparse.Namespace) -> int:
    from autoscaler.emulator.engine import EngineConfig
    from autoscaler.emulator.worker import WorkerConfig, serve

    for name in ("max_running", "prefill_tokens_per_s", "decode_tokens_per_s", "kv_capacity_tokens",
                 "min_chunk_interval_s"):
        if getattr(args, name) <= 0:
            raise BadInput(f"--{name.replace('_', '-')}: must be above 0, got {getattr(args, name)}")
    if args.startup_s < 0:
        raise BadInput(f"--startup-s: must be 0 or more, got {args.startup_s}")
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port: {args.port} is not a port number")
    if args.prefix_cache_tokens is not None and args.prefix_cache_tokens < 0:
        raise BadInput(f"--prefix-cache-tokens: must be 0 or more, got {args.prefix_cache_tokens}")
    engine = EngineConfig(
        max_running=args.max_running,
        prefill_tokens_per_s=args.prefill_tokens_per_s,
        decode_tokens_per_s=args.decode_tokens_per_s,
        kv_capacity_tokens=args.kv_capacity_tokens,
        prefix_cache_tokens=args.kv_capacity_tokens if args.prefix_cache_tokens is None else args.prefix_cache_tokens,
        min_chunk_interval_s=args.min_chunk_interval_s,
        model_name=args.model_name,
        metric_prefix=args.metric_prefix,
    )
    config = WorkerConfig(host=args.host, port=args.port, startup_s=args.startup_s,
                          explicit_timestamps=args.explicit_timestamps, engine=engine, owner=args.owner)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        return asyncio.run(serve(config, ready_line=say))
    except OSError as exc:  # the port is taken, the address is not ours
        from autoscaler.errors import RuntimeFailure

        raise RuntimeFailure(f"emulate worker: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc


def _run_load(args: argparse.Namespace) -> int:
    from autoscaler.emulator.loadgen import run_load_command

    summary = run_load_command(args)
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"sent {summary['sent']}, ok {summary['ok']}, failed {summary['failed']}, "
            f"TTFT p50 {_fmt(summary['ttft_p50_s'])}, p99 {_fmt(summary['ttft_p99_s'])}"
            + ("" if not summary["failures"] else
               " (failures: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["failures"].items())) + ")")
        )
    return 0


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f} s"
