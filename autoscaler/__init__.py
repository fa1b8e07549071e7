"""fleet-autoscaler: keeps a fleet of multi-node LLM serving groups as large as its load needs.

Layout (each folder one layer):
- ``core/``      the pure decision logic: no network, no database, no clock reads.
- ``policy/``    the YAML policy ops edit: strict pydantic models and the loader.
- ``adapters/``  the edge: Prometheus, the SGLang gateway, actuators, the database.
- ``sim/``       the backtest: trace loaders, the fleet model, reference schedules.
- ``emulator/``  a process that behaves like an SGLang TP=2 group, and a load generator.
- ``ledger/``    decisions, node intervals and cost reports.
- ``service/``   the thin loop that wires the core to the adapters on a schedule.
- ``cli/``       the ``autoscaler`` command.
"""

__version__ = "0.1.0"
