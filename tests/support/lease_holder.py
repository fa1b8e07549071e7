"""A small controller stand-in for the HA tests: holds the leadership and writes as a leader would.

    python -m tests.support.lease_holder URL INSTANCE [--lease S --deadline S --retry S] [--write]

Every ``retry`` seconds it prints one JSON line on stdout::

    {"t": wall time, "mono": monotonic, "leader": bool, "epoch": int, "write": "ok" | "refused: ..." | null}

With ``--write``, each round first writes a ``controller_state`` row stamped with the epoch it
held at the end of the previous round (as a tick that checked ``leading()`` and then froze would),
and then renews. So a holder frozen with SIGSTOP and resumed after a takeover tries exactly one
stale write, which the database must refuse. With ``--hold-tx S`` the write transaction stays
open S seconds before its commit (a writer frozen inside it). With ``--child``, SQLite: it starts
a long-lived child process first (like a local actuator's worker), to show the child does not
keep the lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

from sqlalchemy import text

from autoscaler.ledger.schema import WRITE, make_engine, one_line
from autoscaler.service.leadership import LeaseHeld, fenced, is_fenced, leadership_for

_UPSERT = text(
    "INSERT INTO controller_state (key, value, epoch, updated_at) VALUES (:key, :value, :epoch, :at) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at"
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("instance")
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--deadline", type=float, default=2.0)
    p.add_argument("--retry", type=float, default=0.5)
    p.add_argument("--write", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--hold-tx", type=float, default=0.0, help="seconds to keep the write transaction open")
    args = p.parse_args()
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        print(json.dumps({"child": child.pid}), flush=True)
    if args.url.startswith("sqlite"):
        lease = leadership_for(args.url, args.instance)
    else:
        lease = leadership_for(args.url, args.instance, lease_s=args.lease, renew_deadline_s=args.deadline,
                               retry_s=args.retry)
    engine = make_engine(args.url) if args.write else None
    held_epoch: int | None = None
    first = True
    while True:
        outcome = None
        if engine is not None and held_epoch is not None:
            try:
                with engine.connect() as conn:
                    conn.execution_options(**WRITE)
                    with conn.begin():
                        fenced(conn, held_epoch)
                        conn.execute(_UPSERT, {"key": f"probe-{args.instance}", "value": json.dumps({"n": 1}),
                                               "epoch": held_epoch, "at": datetime.now(timezone.utc)})
                        if args.hold_tx:
                            print(json.dumps({"in_tx": True}), flush=True)
                            time.sleep(args.hold_tx)
                outcome = "ok"
            except Exception as exc:  # noqa: BLE001 - reported to the test
                outcome = ("refused: " if is_fenced(exc) else "error: ") + one_line(exc)
        try:
            state = lease.start() if first else lease.try_acquire_or_renew()
        except LeaseHeld as exc:  # SQLite: a second instance refuses to run
            print(json.dumps({"refused": str(exc)}), flush=True)
            return 1
        first = False
        held_epoch = state.epoch if lease.leading() else None
        print(json.dumps({"t": time.time(), "mono": time.monotonic(), "leader": lease.leading(),
                          "epoch": state.epoch, "holder": state.holder, "write": outcome,
                          "error": None if state.error is None else str(state.error)}), flush=True)
        time.sleep(args.retry)


if __name__ == "__main__":
    sys.exit(main())
