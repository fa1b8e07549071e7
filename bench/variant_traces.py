"""Held-out variants of the shared traces: traffic the defaults were not chosen on, built only from
the five shared traces, to check the core against sites it has not seen. Checks, not tuning data
(like ``bench/stress_traces.py``): nothing here may choose a default.

    .venv/bin/python bench/variant_traces.py --out out/variants [--seed 0]
    nice -n 5 .venv/bin/python bench/cv_matrix.py --workers 2 --traces out/variants --seeds 0,7 \
        --cache out/variants-references.json

Writes one folder per variant:

- ``servegen-m-mid-half-a`` / ``-half-b``: a random half of m-mid's 109 clients, and the other
  half (ServeGen folders of symlinks to the chunk files). Another site of the same service: other
  clients' bursts, other collection gaps' weight;
- ``servegen-m-small-half-a`` / ``-half-b``: the same for m-small's 43 clients;
- ``servegen-m-mix``: every client of m-small and of m-mid together (both 14 days from the same
  start): a site twice as large in clients, whose bursts come from both;
- ``azure-2023-conv-reversed``, ``mooncake-fast25-conversation-reversed``: the one-hour traces
  played backwards (``csv``: arrival t -> span - t, sizes and sessions kept; Mooncake's
  ``hash_ids`` are not, so its cache model falls back to sessions): the same bursts met in the
  other order, so a cold start sees other first minutes.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.sim.traces import SERVEGEN_FILE_GLOB, load_trace  # noqa: E402

SHARED = Path("/work/shared/traces")


def link_clients(files: list[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(SERVEGEN_FILE_GLOB):
        old.unlink()
    for i, f in enumerate(files):
        os.symlink(f.resolve(), folder / f"chunk-{i}-trace.csv")


def reverse(path: Path, out: Path) -> int:
    tr = load_trace(str(path))
    t1 = tr.span_s[1]
    order = np.argsort(t1 - tr.t_s, kind="stable")
    t = (t1 - tr.t_s)[order]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp_s", "input_tokens", "output_tokens", "session_id"])
        # -1 is "no session" in a Trace; the csv loader reads any value as a session key, so none is written
        sessions = ["" if k < 0 else k for k in tr.session[order].tolist()]
        w.writerows(zip(np.round(t, 3).tolist(), tr.input_tokens[order].tolist(),
                        tr.output_tokens[order].tolist(), sessions))
    return len(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out/variants")
    ap.add_argument("--traces", default=str(SHARED))
    ap.add_argument("--seed", type=int, default=0, help="which random half of the clients is half a")
    args = ap.parse_args()
    root, out = Path(args.traces), Path(args.out)
    rng = np.random.default_rng(args.seed)
    clients: dict[str, list[Path]] = {}
    for name in ("servegen-m-small", "servegen-m-mid"):
        files = sorted((root / name).glob(SERVEGEN_FILE_GLOB))
        clients[name] = files
        pick = rng.permutation(len(files))
        half = len(files) // 2
        for suffix, idx in (("half-a", pick[:half]), ("half-b", pick[half:])):
            link_clients([files[i] for i in sorted(idx)], out / f"{name}-{suffix}")
            print(f"{out / f'{name}-{suffix}'}: {len(idx)} of {len(files)} clients")
    link_clients(clients["servegen-m-small"] + clients["servegen-m-mid"], out / "servegen-m-mix")
    print(f"{out / 'servegen-m-mix'}: {sum(len(v) for v in clients.values())} clients")
    for name, file in (("azure-2023-conv", "AzureLLMInferenceTrace_conv.csv"),
                       ("mooncake-fast25-conversation", "conversation_trace.jsonl")):
        dest = out / f"{name}-reversed" / "trace.csv"
        n = reverse(root / name / file, dest)
        print(f"{dest}: {n:,} requests, reversed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
