"""The controller's own metrics (``GET /metrics``, names ``autoscaler_*``; docs/metrics.md lists them).

A registry of its own (not prometheus_client's global one), so tests and several controllers in
one process never share counters.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from autoscaler.core.types import PROBLEM_KINDS

disable_created_metrics()  # no *_created series: they double every counter's series for no use here

PHASES = ("off", "starting", "ready", "draining", "stopping", "failed")
SIGNAL_KINDS = PROBLEM_KINDS


class OptionalGauge:
    """A gauge without labels that is absent while its value is unknown: ``set(None)`` or a NaN removes
    the sample (docs/metrics.md: "absent when unknown"). A NaN sample reads as a value in PromQL
    (``autoscaler_slo_ttft_seconds > 3`` is false, ``absent(...)`` is false), so an unknown TTFT
    would pass every alert written for a missing one."""

    def __init__(self, name: str, documentation: str, *, registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._value: float | None = None
        self._lock = threading.Lock()
        registry.register(self)

    def set(self, value: float | None) -> None:
        with self._lock:
            self._value = None if value is None or not math.isfinite(value) else float(value)

    def get(self) -> float | None:
        with self._lock:
            return self._value

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation)
        value = self.get()
        if value is not None:
            family.add_metric([], value)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation)


class ServiceMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, instance: str, version: str) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.groups = Gauge("autoscaler_groups", "Groups in each phase.", ["state"], registry=r)
        for phase in PHASES:
            self.groups.labels(phase).set(0)
        self.groups_desired = Gauge("autoscaler_groups_desired", "target_groups of the last decision.", registry=r)
        self.groups_ceiling = Gauge("autoscaler_groups_ceiling", "The effective ceiling (groups).", registry=r)
        self.groups_cordoned = Gauge("autoscaler_groups_cordoned", "Groups cordoned.", registry=r)
        self.decisions = Counter("autoscaler_decisions_total", "Decisions taken, by action and reason.",
                                 ["action", "reason"], registry=r)
        self.tick_duration = Histogram("autoscaler_tick_duration_seconds", "Wall time of one tick.", registry=r,
                                       buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.drain_duration = Histogram("autoscaler_drain_duration_seconds",
                                        "From gateway removal to drained (or timed out).", registry=r,
                                        buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600))
        self.drain_oldest_age = Gauge("autoscaler_drain_oldest_age_seconds",
                                      "Age of the oldest drain in progress, 0 when none.", registry=r)
        self.drain_timeout = Gauge("autoscaler_drain_timeout_seconds", "The policy's drain.timeout_s.", registry=r)
        self.signal_errors = Counter("autoscaler_signal_errors_total", "Signal problems seen, by signal and kind.",
                                     ["signal", "kind"], registry=r)
        self.reload_errors = Counter("autoscaler_policy_reload_errors_total", "Rejected policy edits.", registry=r)
        self.policy_error = Gauge("autoscaler_policy_error", "1 while the policy file on disk is invalid.", registry=r)
        self.leader = Gauge("autoscaler_leader", "1 when this instance leads, else 0.", registry=r)
        self.epoch = Gauge("autoscaler_epoch", "The leadership epoch this instance holds or last saw.", registry=r)
        self.gateway_up = Gauge("autoscaler_gateway_up", "1 when the last reconcile could list the gateway's "
                                "workers, 0 when it could not (unreachable, refused, not the gateway).", registry=r)
        self.acts_interrupted = Counter("autoscaler_acts_interrupted_total", "Acts cut before they finished: "
                                        "leadership lost, or the shutdown's budget ran out.", registry=r)
        self.reload_refused = Gauge("autoscaler_policy_reload_refused", "1 while a valid policy edit is refused "
                                    "live (actuator.kind changed, or a group dropped that is not off).", registry=r)
        self.last_decision = Gauge("autoscaler_last_decision_timestamp_seconds",
                                   "Time of the last decision recorded in the ledger.",
                                   registry=r)
        self.decisions_unrecorded = Counter(
            "autoscaler_decisions_unrecorded_total", "Decisions that could not be written to the ledger (a full "
            "disk, a read-only or unreachable database); none of them was acted on.", registry=r)
        self.last_tick = Gauge("autoscaler_last_tick_timestamp_seconds", "Time of the last finished tick.",
                               registry=r)
        self.tick_interval = Gauge("autoscaler_tick_interval_seconds", "scaling.tick_interval_s.", registry=r)
        self.requests_cut = Counter("autoscaler_requests_cut_by_drain_total",
                                    "Requests still running when a timed-out drain stopped its group.", registry=r)
        self.saving = Gauge("autoscaler_saving_variable_cost", "Variable-cost saving of this run so far.",
                            ["currency"], registry=r)
        self.node_hours = Gauge("autoscaler_node_hours_total", "Node-hours of this run so far.", registry=r)
        self.fleet_requests = Gauge("autoscaler_fleet_requests", "The fleet's requests from the last signal read.",
                                    ["kind"], registry=r)
        self.slo_ttft = OptionalGauge("autoscaler_slo_ttft_seconds", "The fleet's TTFT at the policy percentile.",
                                      registry=r)
        self.slo_target = Gauge("autoscaler_slo_ttft_target_seconds", "slo.ttft_target_s.", registry=r)
        self.paused = Gauge("autoscaler_paused", "1 while an operator pause is in force.", registry=r)
        self.info = Gauge("autoscaler_info", "Which instance this is.", ["instance", "version", "policy_sha256"],
                          registry=r)
        self._instance, self._version = instance, version
        self._info_sha: str | None = None
        self.leader.set(0)

    def set_policy(self, sha: str, tick_interval_s: float, drain_timeout_s: float, ttft_target_s: float) -> None:
        if self._info_sha is not None:
            self.info.remove(self._instance, self._version, self._info_sha)
        self.info.labels(self._instance, self._version, sha).set(1)
        self._info_sha = sha
        self.tick_interval.set(tick_interval_s)
        self.drain_timeout.set(drain_timeout_s)
        self.slo_target.set(ttft_target_s)

    def set_optional(self, gauge: Gauge, value: float | None, *labels: str) -> None:
        target = gauge.labels(*labels) if labels else gauge
        if value is None:
            if labels:
                try:
                    gauge.remove(*labels)
                except KeyError:
                    pass
            return
        target.set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)
