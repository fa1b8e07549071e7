"""A controller process for crash tests: the executor alone, driven tick by tick.

    python -m tests.support.executor_driver --policy P --db URL --gateway URL [--drain G] [--until-off G]

It starts from the records (as ``autoscaler run`` does: nothing to recover, the first reconcile
reads the real state), optionally begins a drain of G, then reconciles every 0.3 s; with ``--until-off`` it exits 0 once G is off. A test SIGKILLs it
to crash the controller at a chosen moment.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from autoscaler.actuators.local import LocalActuator
from autoscaler.adapters.gateway import GatewayClient
from autoscaler.adapters.worker_probe import WorkerProbe
from autoscaler.core.types import Action
from autoscaler.ledger.live import LiveLedger
from autoscaler.ledger.store import Ledger
from autoscaler.policy.loader import load_policy
from autoscaler.service.executor import Executor
from tests.support.live import decision


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--policy", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--gateway", required=True)
    p.add_argument("--drain")
    p.add_argument("--until-off")
    p.add_argument("--ticks", type=int, default=600)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    loaded = load_policy(args.policy)
    ledger = Ledger(args.db)
    run_id = ledger.start_run("live", loaded, at=time.time(), label="driver")
    live = LiveLedger(ledger)
    ex = Executor(loaded.policy, live, GatewayClient(args.gateway),
                  LocalActuator(loaded.policy, owner=live.fleet_id(epoch=1)), WorkerProbe(), run_id=run_id, epoch=1)
    ex.init_node_states(time.time())
    print("first reconcile:", ex.reconcile().steps, file=sys.stderr, flush=True)
    if args.drain:
        print(ex.apply(decision(Action.SCALE_DOWN, args.drain)), file=sys.stderr, flush=True)
    for _ in range(args.ticks):
        report = ex.reconcile()
        if report.steps:
            print(report.steps, file=sys.stderr, flush=True)
        if args.until_off and ex.records[args.until_off].phase == "off":
            ledger.end_run(run_id, time.time(), "done")
            return 0
        time.sleep(0.3)
    return 3


if __name__ == "__main__":
    sys.exit(main())
