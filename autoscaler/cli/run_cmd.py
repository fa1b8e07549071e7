"""``autoscaler run``: the controller as a long-lived service (see ``autoscaler.service.runner``)."""

from __future__ import annotations

import argparse
import logging

from autoscaler.errors import BadInput
from autoscaler.policy.loader import load_policy
from autoscaler.settings import is_memory_database, load_settings, status_token


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="run the controller: reconcile, read signals, decide, record and act every tick",
        description="Run the controller until SIGTERM/SIGINT (exit 0 within 30 s; a drain in progress resumes "
        "at the next start). Only one instance acts: on PostgreSQL a lease in the database elects a leader "
        "(standbys take over within 30 s of its death); on SQLite a second instance exits 1. Serves "
        "/healthz, /metrics and /status on --listen. The policy file is re-read when it changes; an invalid "
        "edit is rejected and the last good policy keeps running. Secrets, each also as a file named by "
        "NAME_FILE: AUTOSCALER_GATEWAY_API_KEY, AUTOSCALER_STATUS_TOKEN, AUTOSCALER_DATABASE_URL (a URL with a "
        "password). Children (workers, site commands) never inherit them.",
    )
    parser.add_argument("--policy", required=True, metavar="FILE", help="the policy YAML file")
    parser.add_argument("--db", metavar="URL",
                        help="ledger database (default: $AUTOSCALER_DATABASE_URL, else sqlite:///autoscaler.db)")
    parser.add_argument("--prometheus", metavar="URL",
                        help="Prometheus base URL (default: $AUTOSCALER_PROMETHEUS_URL, else http://127.0.0.1:9090)")
    parser.add_argument("--gateway", metavar="URL",
                        help="SGLang Model Gateway URL (default: $AUTOSCALER_GATEWAY_URL, else http://127.0.0.1:30000)")
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help="where /healthz, /metrics and /status are served (default: $AUTOSCALER_LISTEN, "
                        "else 127.0.0.1:9108)")
    parser.add_argument("--signals", choices=("prometheus", "direct"), default="prometheus",
                        help="where load signals come from: prometheus (default) or direct (each worker's "
                        "/metrics, for a site without Prometheus)")
    parser.add_argument("--once", action="store_true", help="run one tick, then exit (cron-style use, tests)")
    parser.set_defaults(func=run)


def _check_listen(listen: str) -> None:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadInput(f"--listen: {listen!r} is not HOST:PORT (e.g. 127.0.0.1:9108)")


def run(args: argparse.Namespace) -> int:
    loaded = load_policy(args.policy)
    settings = load_settings(prometheus=args.prometheus, gateway=args.gateway, db=args.db, listen=args.listen)
    _check_listen(settings.listen)
    if is_memory_database(settings.database_url):
        # The records are the controller's memory across restarts and the finance report's source.
        raise BadInput(f"{settings.database_url_from}: {settings.database_url!r} is an in-memory database: a "
                       "long-lived controller's records would vanish when it exits; give a file "
                       "(sqlite:///autoscaler.db) or a PostgreSQL URL")
    if not args.verbose:
        logging.getLogger("autoscaler").setLevel(logging.INFO)
    from autoscaler.service.runner import Service

    service = Service(settings, loaded, signals_mode=args.signals, status_token=status_token())
    return service.run(once=args.once)
