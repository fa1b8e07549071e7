"""The scaling policy: one YAML file describes one fleet and how to scale it.

Every model is frozen and strict (``extra="forbid"``); every field carries its unit in its name and a
description. Validators reject, they never rewrite. Validation never reads the clock: a pin whose
time has passed is inactive, not invalid.

Cross-field rules raise ``FieldError`` so the message names the exact field path, e.g.
``fleet.floor_groups: 4 is above fleet.ceiling_groups (3)``.
"""

from __future__ import annotations

import re
from datetime import datetime, time
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, Strict, field_validator, model_validator

# Strict scalars: "2" is not a number and true is not 1 (an int is still a valid float).
Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Float = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNegFloat = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
PosFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NAME_MAX = 64  # a group's name goes into unit names, file names and labels (a systemd unit name stops at 256)


def _name(value: str) -> str:
    """A name of a group, node or window: ASCII letters, digits, '.', '_' and '-', at most 64."""
    if not _NAME.match(value) or len(value) > NAME_MAX:
        odd = next((c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))), None)
        if not value:
            why = "is empty"
        elif odd is not None:
            why = f"holds {odd!r}"
        elif len(value) > NAME_MAX:
            why = f"is {len(value):,} characters long (at most {NAME_MAX})"
        else:
            why = "does not start with a letter or a digit"
        raise ValueError(f"{_short_repr(value)} {why}: a name is ASCII letters, digits, '.', '_' and '-', "
                         f"starting with a letter or a digit, at most {NAME_MAX} characters")
    return value


def _short_repr(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


Name = Annotated[str, AfterValidator(_name)]


class FieldError(ValueError):
    """A cross-field rule failed. ``field`` is the path below the model that raised it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"\x00{field}\x00{message}")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, validate_default=True)


# --------------------------------------------------------------------------------------- fleet
# A host name (RFC 1123 labels; "_" too, as /etc/hosts allows it) or an IP address, nothing else: the
# address goes into the command actuator's argv ({node.address}, {group.worker_url}), where a leading
# "-" is an option to ssh ("-oProxyCommand=...") and "$", ";", a space or a quote mean something to
# any shell a site script hands it to.
_HOST_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^{_HOST_LABEL}(\.{_HOST_LABEL})*\.?$")


_SCOPE = re.compile(r"^[A-Za-z0-9_.-]{1,20}$")
_INET_ATON = re.compile(r"^(0x[0-9a-f]+|\d+)(\.(0x[0-9a-f]+|\d+)){0,3}$")


def same_host_key(host: str) -> str:
    """The form two spellings of one host share, for the duplicate checks (a policy's text is kept
    as written: validators reject, never rewrite): a name without case or a trailing dot
    (``NODE-A.example.`` is ``node-a.example``), an IP address in its compressed form with an
    IPv4-mapped IPv6 address as its IPv4 one (``::ffff:10.0.0.11`` is ``10.0.0.11``)."""
    import ipaddress

    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(bare.replace("%25", "%", 1))
    except ValueError:
        name = bare.lower().rstrip(".")
        if _INET_ATON.match(name):  # 127.1, 0x7f.0.0.1, 2130706433: what the resolver reads as 127.0.0.1
            import socket

            try:
                return str(ipaddress.IPv4Address(socket.inet_aton(name)))
            except OSError:
                pass
        return name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)  # the hex in lower case; a scope ID (an interface name) keeps its case


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a host name or an IP address (None when it is one)."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        # Python accepts any text after "%" as an IPv6 scope ID ("fe80::1%$(id)"): an interface
        # name or number only (in a URL, RFC 6874 writes the "%" as "%25": "fe80::1%25eth0").
        scope = host.partition("%")[2]
        if "%" in host and not _SCOPE.match(scope):
            return f"{host!r} has the IPv6 scope ID {scope!r}: an interface name or number only (letters, " \
                   f"digits, '.', '_' and '-', at most 20)"
        return None
    if len(host) > 253 or not _HOSTNAME.match(host):
        odd = next((c for c in host if not (c.isascii() and (c.isalnum() or c in "._-"))), None)
        if host.startswith("-"):
            why = "starts with '-' (an option to ssh and most commands)"
        elif odd is not None:
            why = f"holds {odd!r}"
        else:
            why = "is not a host name (labels of letters, digits, '-' and '_', at most 63 long, not starting or " \
                  "ending with '-')"
        return f"{host!r} {why}: a host name or an IP address only"
    return None


class Node(StrictModel):
    name: Name = Field(description="The node's name, unique in the fleet (e.g. spark-1): ASCII letters, digits, "
                      "'.', '_', '-', at most 64.")
    address: str = Field(
        min_length=1,
        description="The node's host name or IP address, unique in the fleet; nothing else (no user@, no "
        "port, no leading '-', space or shell character; an IPv6 scope ID only as an interface name, fe80::1%eth0): "
        "it is passed to the actuator's commands. Compared without case, trailing dot or IPv4-mapped form.",
    )

    @field_validator("address")
    @classmethod
    def _host(cls, value: str) -> str:
        problem = host_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class Group(StrictModel):
    name: Name = Field(description="The group's name, unique in the fleet (e.g. g1): ASCII letters, digits, "
                      "'.', '_', '-', at most 64.")
    worker_url: str = Field(
        description="URL of the group's SGLang server (node-rank 0), as registered with the gateway: "
        "http(s)://host:port with no path and no trailing slash."
    )
    nodes: tuple[Node, ...] = Field(description="The fixed set of nodes the group runs on, node-rank order.")

    @field_validator("worker_url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            raise ValueError(f"{value!r} must be http(s)://host:port (a port from 1 to 65535)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
            raise ValueError(f"{value!r} must be http(s)://host:port")
        if parts.path not in ("",) or parts.query or parts.fragment:
            # A trailing slash makes the gateway probe //health and retry for 30 minutes.
            raise ValueError(f"{value!r} must have no path, query or trailing slash")
        if parts.username is not None or parts.password is not None:
            raise ValueError(f"{value!r} must have no user or password")
        host = parts.netloc.rsplit(":", 1)[0]  # as written: [::1] stays bracketed, case kept
        problem = host_problem(host[1:-1] if host.startswith("[") else host)
        if problem:
            raise ValueError(f"the host of {value!r}: {problem}")
        return value

    @property
    def metrics_instance(self) -> str:
        """The ``instance`` label Prometheus gives this group's worker: host:port of worker_url."""
        parts = urlsplit(self.worker_url)
        return f"{parts.hostname}:{parts.port}"


class Fleet(StrictModel):
    model_kv_heads: Int = Field(8, ge=1, description="The model's KV heads; the group size must divide it.")
    group_size_nodes: Int = Field(2, ge=1, description="Nodes per group (tensor parallel size across nodes).")
    floor_groups: Int = Field(ge=1, description="Fewest groups ever active (the floor).")
    ceiling_groups: Int = Field(ge=1, description="Most groups ever active (the ceiling).")
    requests_per_group: Int = Field(6, ge=1, description="Requests a group runs at once (--max-running-requests).")
    startup_expected_s: PosFloat = Field(
        600, description="Expected time from start to ready for one group; replaced by the measured p95."
    )
    groups: tuple[Group, ...] = Field(min_length=1, description="The groups, in start order (first started first).")

    @model_validator(mode="after")
    def _rules(self) -> Fleet:
        if self.model_kv_heads % self.group_size_nodes:
            raise FieldError(
                "group_size_nodes",
                f"{self.group_size_nodes} does not divide fleet.model_kv_heads ({self.model_kv_heads})",
            )
        if self.floor_groups > self.ceiling_groups:
            raise FieldError(
                "floor_groups", f"{self.floor_groups} is above fleet.ceiling_groups ({self.ceiling_groups})"
            )
        if self.ceiling_groups > len(self.groups):
            raise FieldError(
                "ceiling_groups", f"{self.ceiling_groups} is above the number of groups defined ({len(self.groups)})"
            )
        seen: dict[tuple[str, str], tuple[str, str]] = {}  # (what, its key) -> (the group, as written)
        for i, group in enumerate(self.groups):
            if len(group.nodes) != self.group_size_nodes:
                raise FieldError(
                    f"groups[{i}].nodes",
                    f"group {group.name!r} has {len(group.nodes)} nodes; fleet.group_size_nodes is {self.group_size_nodes}",
                )
            # One worker however its URL is spelt: the scheme, the host's case, a trailing dot or an
            # IPv4-mapped address change nothing (HTTP://127.0.0.1:38011 is http://127.0.0.1:38011,
            # whose series the signals would give to one group only).
            url = urlsplit(group.worker_url)
            worker = f"{same_host_key(url.netloc.rsplit(':', 1)[0])}:{url.port}"
            for kind, key, text in (("group name", group.name, group.name),
                                    ("worker_url", worker, group.worker_url)):
                if (kind, key) in seen:
                    other, first = seen[(kind, key)]
                    same = "" if text == first else f" (as {first!r}: host and port compared without scheme, case, " \
                                                    "trailing dot or IPv4-mapped form)"
                    raise FieldError(f"groups[{i}]", f"{kind} {text!r} is also used by group {other!r}{same}")
                seen[(kind, key)] = (group.name, text)
            for j, node in enumerate(group.nodes):
                for kind, key, text in (("node", node.name, node.name),
                                        ("node address", same_host_key(node.address), node.address)):
                    if (kind, key) in seen:
                        other, first = seen[(kind, key)]
                        same = "" if text == first else f" (as {first!r}: compared without case, trailing dot " \
                                                        "or IPv4-mapped form)"
                        raise FieldError(
                            f"groups[{i}].nodes[{j}]",
                            f"{kind} {text!r} is also in group {other!r}{same}; groups are fixed, disjoint node sets",
                        )
                    seen[(kind, key)] = (group.name, text)
        return self

    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)


# ----------------------------------------------------------------------------------------- slo
class Slo(StrictModel):
    ttft_target_s: PosFloat = Field(3.0, description="Time-to-first-token target (seconds).")
    ttft_percentile: Float = Field(99, gt=0, lt=100, description="The percentile that must meet the target.")
    capacity_miss_budget_pct: Float = Field(
        0.4,
        gt=0,
        le=100,
        description="Share of requests (%) that may miss the TTFT target because of capacity (queue wait "
        "pushed them over, or a drain cut them): the error budget scale-downs spend. Misses burning "
        "faster than this make scale-downs more careful; an unspent budget makes them bolder. Below the "
        "SLO's own bar (0.5 pp of always-on) by a margin for the burn's estimate: it overspent by up to 7%.",
    )


# ------------------------------------------------------------------------------------- scaling
class ScaleUp(StrictModel):
    on_utilization: Bool = Field(
        True, description="Scale up when running+queued requests exceed ready+starting groups at the target utilisation."
    )
    queued_per_group_above: NonNegFloat | None = Field(
        1.0, description="Scale up when queued requests per ready group exceed this (null: off)."
    )
    on_slo_burn: Bool = Field(
        True,
        description="Scale up when the TTFT percentile misses the target and queue wait is the cause "
        "(misses that more capacity would fix, not a long prompt's own prefill).",
    )
    slo_burn_min_queue_wait_s: NonNegFloat = Field(
        0.5, description="Queue wait at the SLO percentile above which a TTFT miss counts as a capacity miss."
    )
    slo_burn_for_s: NonNegFloat = Field(
        120,
        description="The capacity miss must last this long before it adds a group (seconds): a burst shorter "
        "than a group's start-up is over before the group is ready.",
    )
    max_groups_per_decision: Int = Field(2, ge=1, description="Most groups added by one decision.")


class ScaleDown(StrictModel):
    utilization_below: Fraction = Field(
        0.55,
        description="Scale down only when the remaining groups would run below this utilisation "
        "(current demand and forecast).",
    )
    stabilization_s: NonNegFloat = Field(
        300, description="The scale-down condition must hold continuously this long (seconds)."
    )
    cooldown_after_scale_up_s: NonNegFloat = Field(600, description="No scale-down this long after a scale-up (s).")
    min_group_uptime_s: NonNegFloat = Field(900, description="A group is not drained before it has been ready this long.")
    min_measured_rises: Int = Field(
        30, ge=0, le=360,
        description="A drain on the measured risk waits until the fleet's own history holds this many rises "
        "(one per closed core minute, a lead time after it; in a cold start also one per tick, from a minute "
        "starting at that tick): before that, the cold-start prior would decide alone, and a guess about a "
        "fleet never seen is no reason to take capacity away. 0 lets the prior decide.",
    )
    excess_minutes: NonNegFloat | None = Field(
        3.0, le=60,
        description="The drain's risk in requests (docs/core.md): a measured rise that would put demand above "
        "the remaining groups within a lead time is taken to hold the excess this many minutes, and the drain "
        "is judged on the capacity misses it adds per arrival over the lead time (a burst that swamps the whole "
        "fleet adds none; an excess of one request makes only some arrivals wait past the TTFT target), set "
        "against the budget's allowed share. null: judged on the chance of any excess within the lead time "
        "(the exceedance risk, the rule until 2026-12-04).",
    )
    tail_within_h: NonNegFloat | None = Field(
        3.0, le=12,
        description="The week's tail of measured rises (docs/core.md) counts only the hours whose time of day is "
        "within this many hours of now's, on earlier days (the six recent hours always count): a daily cycle's "
        "evening bursts say little about its nights. null: every hour of the week counts.",
    )
    silence_s: NonNegFloat | None = Field(
        300, ge=60, le=3600,
        description="Silence drain (docs/core.md): once no request has arrived and none runs or waits for this "
        "many seconds, a drain is judged on what a return of the traffic would cost: the capacity misses it adds "
        "against always-on if the traffic came back at its level before the silence, over a whole lead time, "
        "against the misses the error budget still has free over three days. null: off.",
    )
    tick_rises: bool = Field(
        False,
        description="In a cold start, also measure a rise from a minute starting at every tick, so that 30 "
        "rises come in about 19 minutes instead of 41. Off by default: on the matrix it met 2 more cells at "
        "three groups but lost the SLO in 2 more at five (one-hour Mooncake traces drained too early; "
        "docs/matrix.md).",
    )


class Scaling(StrictModel):
    tick_interval_s: PosFloat = Field(
        15, le=300, description="How often the controller decides (seconds; at most 300: a longer tick leaves "
        "a load change unanswered, and a bad edit of it in force, for that long).",
    )
    target_utilization: Fraction = Field(
        1.0,
        description="Share of a group's request slots the fleet aims to fill (running+queued / slots) before "
        "it adds a group. 1.0: add a group once requests queue; a short queue costs seconds of TTFT, "
        "an extra group costs a group start-up of node-hours.",
    )
    spare_groups: Int = Field(0, ge=0, description="Groups kept above demand (N+1 headroom for a failing group).")
    disruption_budget_per_hour: Int = Field(
        4, ge=1, description="Most groups started or drained in any hour; scale-downs past it wait (scale-ups never do)."
    )
    scale_up: ScaleUp = Field(default_factory=ScaleUp, description="When to add groups.")
    scale_down: ScaleDown = Field(default_factory=ScaleDown, description="When to remove a group.")

    @model_validator(mode="after")
    def _no_flapping(self) -> Scaling:
        # After a scale-down the remaining groups run below scale_down.utilization_below; if that is
        # at or above the scale-up point, constant demand between the two drains a group and adds it
        # back (target 0.5, threshold 0.55: demand 6.3 on 3 groups of 6 drains to 2 at 0.525 < 0.55,
        # then 0.525 > 0.5 adds the third back, every cooldown).
        if self.scale_down.utilization_below >= self.target_utilization:
            raise FieldError(
                "scale_down.utilization_below",
                f"{self.scale_down.utilization_below:g} is at or above scaling.target_utilization "
                f"({self.target_utilization:g}): the scale-up point must be above the scale-down point, "
                "or constant demand between them drains and re-adds a group (flapping)",
            )
        return self


# ----------------------------------------------------------------------------------- schedules
class Weekly(StrictModel):
    """A weekly window: on the given weekdays from start to end (local time); end <= start wraps past midnight."""

    name: Name = Field(description="A name for logs and decisions.")
    days: tuple[str, ...] = Field(WEEKDAYS, min_length=1, description="Weekdays the window starts on: mon..sun.")
    start: str = Field(description="Local start time HH:MM.")
    end: str = Field(description="Local end time HH:MM; at or before start means it ends the next day.")

    @field_validator("days")
    @classmethod
    def _days(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [d for d in value if d not in WEEKDAYS]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a weekday; use {', '.join(WEEKDAYS)}")
        return value

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str) -> str:
        if not _HHMM.match(value):
            raise ValueError(f"{value!r} is not a time of day HH:MM (00:00-23:59)")
        return value

    def start_time(self) -> time:
        return time.fromisoformat(self.start)

    def end_time(self) -> time:
        return time.fromisoformat(self.end)


class ScheduleWindow(Weekly):
    floor_groups: Int | None = Field(None, ge=1, description="While active, the floor is at least this.")
    ceiling_groups: Int | None = Field(None, ge=1, description="While active, the ceiling is at most this (a cap).")

    @model_validator(mode="after")
    def _something(self) -> ScheduleWindow:
        if self.floor_groups is None and self.ceiling_groups is None:
            raise FieldError("floor_groups", "a schedule window must set floor_groups, ceiling_groups or both")
        return self


class Pin(StrictModel):
    groups: Int = Field(ge=1, description="Hold exactly this many groups (within the fleet's floor and ceiling).")
    until: datetime = Field(description="The pin expires at this time (ISO 8601; without a zone, UTC).")
    note: str = Field("", description="Why the pin was set; shown in decisions (one line).")

    @field_validator("note")
    @classmethod
    def _one_line(cls, value: str) -> str:
        # The note goes into decision details and the one log line per decision.
        bad = next((c for c in value if ord(c) < 32 or ord(c) == 127 or c in "\x85\u2028\u2029"), None)
        if bad is not None:
            raise ValueError(f"holds a line break or control character ({bad!r}); write one line")
        return value

    @field_validator("until")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        from datetime import timezone

        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class Schedules(StrictModel):
    timezone: str = Field("UTC", description="IANA time zone the windows are written in (e.g. Europe/Berlin).")
    windows: tuple[ScheduleWindow, ...] = Field((), description="Calendar windows that raise the floor or cap the ceiling.")
    freezes: tuple[Weekly, ...] = Field((), description="Windows in which nothing scales down.")
    pin: Pin | None = Field(None, description="A manual pin that expires by itself; overrides schedules.")
    # The zone, resolved once when the policy loads (the core must not read zone files per decision).
    _zone: ZoneInfo = PrivateAttr()

    def model_post_init(self, context: object, /) -> None:
        self._zone = ZoneInfo(self.timezone)

    @property
    def zone(self) -> ZoneInfo:
        """The schedules' time zone, resolved when the policy was loaded."""
        return self._zone

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
        return value


# ------------------------------------------------------------------------------------ forecast
class Forecast(StrictModel):
    enabled: Bool = Field(True, description="Scale on forecast demand over the start-up lead time.")
    horizon_s: PosFloat | None = Field(
        None, description="How far ahead to look; null means the group start-up lead time (measured p95)."
    )
    trend_window_s: PosFloat = Field(600, description="Recent history fitted for the trend (seconds).")
    seasonal_days: Int = Field(7, ge=0, le=28, description="Earlier days whose same time of day informs the forecast.")
    seasonal_statistic: str = Field(
        "peak",
        pattern=r"^(rise|peak)$",
        description="How earlier days inform the forecast: 'rise' adds their typical rise over the horizon to "
        "today's level; 'peak' expects their typical highest demand within the horizon.",
    )
    seasonal_quantile: Float = Field(
        0.4, ge=0, le=1, description="Which quantile across earlier days to expect (0.5: the median day)."
    )
    min_startup_samples: Int = Field(
        5, ge=1, description="Measured start-ups needed before their p95 replaces fleet.startup_expected_s."
    )
    minute_s: PosFloat = Field(
        60, le=600,
        description="The core's minute: the unit its risk history is kept in (per-minute demand means, "
        "rises within a lead time, the six hours = 360 minutes of recent rises and the budget burn's "
        "six-hour half-life). 60 on a real fleet; a fleet whose time is compressed (the demo replays a "
        "day in minutes) sets it so that a minute holds a few ticks.",
    )


# ---------------------------------------------------------------------------------------- cost
class Cost(StrictModel):
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 currency of every price.")
    node_power_active_w: NonNegFloat = Field(240, description="Power of one node while its group serves (W).")
    node_power_idle_w: NonNegFloat = Field(45, description="Power of one node that is stopped but powered (W).")
    node_power_off_w: NonNegFloat = Field(3, description="Power of one node that is powered off (W).")
    pue: Float = Field(1.3, ge=1.0, le=5.0, description="Power usage effectiveness of the site (>= 1).")
    energy_price_per_kwh: NonNegFloat = Field(0.15, description="Price of one kWh at the meter.")
    node_hour_fee: NonNegFloat = Field(0.0, description="Per-node-hour lease or colocation fee while active.")
    fixed_monthly_per_node: NonNegFloat = Field(
        110.0, description="Capital amortisation and support per node per month; paid on or off."
    )
    fixed_monthly_fleet: NonNegFloat = Field(0.0, description="Other fixed monthly costs of the fleet.")


# ------------------------------------------------------------------------------------- signals
SIGNAL_NAMES = ("running", "queued", "kv_usage", "request_rate", "ttft_p99_s", "queue_wait_p99_s")
_PLACEHOLDERS = {"prefix", "window", "quantile", "label"}


def _default_queries() -> dict[str, str]:
    return {
        "running": "sum by ({label}) ({prefix}num_running_reqs)",
        "queued": "sum by ({label}) ({prefix}num_queue_reqs)",
        "kv_usage": "max by ({label}) ({prefix}token_usage)",
        "request_rate": "sum by ({label}) (rate({prefix}num_requests_total[{window}]))",
        "ttft_p99_s": "histogram_quantile({quantile}, sum by ({label}, le) "
        "(rate({prefix}time_to_first_token_seconds_bucket[{window}])))",
        "queue_wait_p99_s": "histogram_quantile({quantile}, sum by ({label}, le) "
        "(rate({prefix}queue_time_seconds_bucket[{window}])))",
    }


class Signals(StrictModel):
    metric_prefix: str = Field(
        "sglang:", pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", description="Metric name prefix: 'sglang:' or 'sglang_'."
    )
    group_label: str = Field(
        "instance", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$", description="Label whose value maps a series to a group."
    )
    window_s: Int = Field(60, ge=5, le=3600, description="Range of rate() and histogram windows (seconds, 5 to 3600).")
    staleness_s: PosFloat = Field(60, le=3600, description="A sample older than this is stale (seconds, at most 3600).")
    timeout_s: PosFloat = Field(3, le=60, description="Most time one Prometheus query may take (seconds, at most 60).")
    queries: dict[str, str] = Field(
        default_factory=_default_queries,
        description="PromQL per signal; {prefix}, {window}, {quantile} and {label} are filled in.",
    )

    @field_validator("queries")
    @classmethod
    def _queries(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(SIGNAL_NAMES))
        if unknown:
            raise ValueError(f"unknown signal {unknown[0]!r}; signals are {', '.join(SIGNAL_NAMES)}")
        for name, query in value.items():
            used = set(re.findall(r"\{(\w+)\}", query))
            if used - _PLACEHOLDERS:
                raise ValueError(f"{name}: unknown placeholder {{{sorted(used - _PLACEHOLDERS)[0]}}}")
        return {**_default_queries(), **value}

    def render(self, signal: str, percentile: float) -> str:
        """The PromQL for one signal with its placeholders filled."""
        q = self.queries[signal]
        for key, val in (
            ("prefix", self.metric_prefix),
            ("window", f"{self.window_s}s"),
            ("quantile", f"{percentile / 100:g}"),
            ("label", self.group_label),
        ):
            q = q.replace("{" + key + "}", val)
        return q


# --------------------------------------------------------------------------------------- drain
class OnDrainTimeout(StrEnum):
    STOP = "stop"  # stop the group; requests still running are cut and counted
    KEEP_SERVING = "keep_serving"  # give up the scale-down; the group returns to service


class Drain(StrictModel):
    timeout_s: PosFloat = Field(600, description="Most time a drain waits for in-flight requests (seconds).")
    on_timeout: OnDrainTimeout = Field(
        OnDrainTimeout.STOP, description="At the timeout: 'stop' (cut and count what is left) or 'keep_serving'."
    )
    poll_interval_s: PosFloat = Field(
        2, le=60, description="How often the drain reads the worker's running+queued (seconds, at most 60)."
    )
    settle_s: NonNegFloat = Field(
        2, description="A drain completes only on a worker reading taken at least this long after the gateway "
        "removal, so requests in transit when the DELETE lands are counted (seconds).",
    )


# ------------------------------------------------------------------------------------ actuator
class ActuatorKind(StrEnum):
    ADVISORY = "advisory"  # decide and record on a shadow fleet; act on nothing
    LOCAL = "local"  # start `autoscaler emulate worker` processes on this machine (tests, demo)
    COMMAND = "command"  # run argv templates per node (ssh + systemd, docker, IPMI/BMC, wake-on-LAN)


class PowerState(StrEnum):
    IDLE = "idle"  # stopped but powered: charged at node_power_idle_w
    OFF = "off"  # powered off: charged at node_power_off_w


Argv = tuple[str, ...]
TEMPLATE_FIELDS = ("node.name", "node.address", "group.name", "group.worker_url", "epoch", "instance")
_TEMPLATE_FIELD = re.compile(r"\{([^{}]*)\}")


POWER_AND_SITE_TEMPLATES = ("start", "stop", "status", "power_on", "power_off", "power_status")


class Actuator(StrictModel):
    kind: ActuatorKind = Field(ActuatorKind.ADVISORY, description="advisory (default: act on nothing), local or command.")
    stopped_power_state: PowerState | None = Field(
        None, description="What a stopped node draws: idle or off. Default: off for local and advisory; for "
        "command, off when power_off is set, else idle.",
    )
    startup_s: NonNegFloat = Field(
        20, description="local: the emulated worker's load time before /health answers 200 (seconds)."
    )
    start: Argv | None = Field(None, description="command: argv run once per node to start it (no shell).")
    stop: Argv | None = Field(None, description="command: argv run once per node to stop it.")
    status: Argv | None = Field(
        None, description="command: argv per node; exit 0 = running, 3 = stopped (as systemctl is-active), "
        "anything else = unknown.",
    )
    power_on: Argv | None = Field(None, description="command: optional argv per node run before start (IPMI, WoL).")
    power_off: Argv | None = Field(None, description="command: optional argv per node run after stop.")
    power_status: Argv | None = Field(
        None, description="command: argv per node asking the power controller (BMC, PDU) whether the node is powered; "
        "exit 0 with its last word 'on' or 'off' (ipmitool's 'Chassis Power is off'), anything else = unknown. "
        "Required with power_on or power_off: its 'off' is what says a node is off (its in-band status cannot answer "
        "then), and a powered-on node is booted once its status answers.",
    )
    timeout_s: PosFloat = Field(60, description="command: most time one command may run before it is killed (s).")
    output_limit_bytes: Int = Field(
        65536, ge=256, le=16_777_216, description="command: most output kept from one command (the tail is recorded)."
    )

    @model_validator(mode="after")
    def _rules(self) -> Actuator:
        if self.kind is ActuatorKind.COMMAND:
            for name in ("start", "stop", "status"):
                if not getattr(self, name):
                    raise FieldError(name, "is required when actuator.kind is command (an argv list)")
        else:
            for name in POWER_AND_SITE_TEMPLATES:
                if getattr(self, name) is not None:
                    raise FieldError(name, f"is only used by actuator.kind command (this is {self.kind.value})")
        if (self.power_on or self.power_off) and not self.power_status:
            raise FieldError("power_status", "is required with power_on or power_off: only the power controller can "
                             "say a node is off (its status command cannot answer then)")
        for name in POWER_AND_SITE_TEMPLATES:
            argv = getattr(self, name)
            if argv is None:
                continue
            if not argv or not argv[0]:
                raise FieldError(name, "must be a non-empty argv list")
            for arg in argv:
                for key in _TEMPLATE_FIELD.findall(arg):
                    if key not in TEMPLATE_FIELDS:
                        raise FieldError(name, f"{{{key}}} is not a template field (use {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")
        return self

    @property
    def power_state_when_stopped(self) -> PowerState:
        if self.stopped_power_state is not None:
            return self.stopped_power_state
        if self.kind is ActuatorKind.COMMAND:
            return PowerState.OFF if self.power_off else PowerState.IDLE
        return PowerState.OFF


# ----------------------------------------------------------------------------------- lifecycle
class UnknownWorker(StrEnum):
    ADOPT = "adopt"  # a healthy worker of a group the records call off is taken as ready
    REMOVE = "remove"  # it is removed from the gateway (and the group stopped)


class LifecycleRules(StrictModel):
    health_deadline_s: PosFloat = Field(
        1200, description="Most time from the start command to the worker's /health answering 200 (seconds)."
    )
    register_deadline_s: PosFloat = Field(
        120, description="Most time from POST /workers to the gateway listing the worker healthy (seconds)."
    )
    start_retries: Int = Field(
        3, ge=0, le=100, description="Failed starts retried this many times; after the last the group is cordoned."
    )
    retry_backoff_s: PosFloat = Field(60, description="Wait before the first retry; doubles each time (seconds).")
    retry_backoff_max_s: PosFloat = Field(900, description="Longest wait between retries (seconds).")
    health_failures_before_failed: Int = Field(
        3, ge=1, description="A ready group whose /health fails this many probes in a row (or once while the "
        "gateway also lists it unhealthy) is failed: drained, stopped and replaced.",
    )
    health_timeout_s: PosFloat = Field(
        20, description="Most time one /health probe may take (seconds). SGLang's /health runs a one-token "
        "generation and waits up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for it; under load it answers once the "
        "next token comes out, so it takes about a second.",
    )
    status_sweep_s: PosFloat = Field(
        60, description="Every this many seconds (and at the first tick) the actuator's status of every group is "
        "read, whatever the records say: a running group recorded off is adopted or stopped, a ready group "
        "that is not running is failed and replaced.",
    )
    unknown_worker: UnknownWorker = Field(
        UnknownWorker.ADOPT, description="A worker the gateway lists but the records call off: adopt or remove."
    )
    stop_deadline_s: PosFloat = Field(
        120, description="Most time from the stop command to the group reported stopped (seconds)."
    )
    boot_deadline_s: PosFloat = Field(
        600, description="command with power_on: most time from the power-on to every node's status answering "
        "(booted), when the start command runs (seconds). A group not booted by then is failed.",
    )
    health_max_failed_groups: Int = Field(
        1, ge=1, description="Disruption budget of health: at most this many groups are failed for /health at once "
        "(failed, not yet off); and never the last ready group that serves. A group over the budget stays in "
        "service and is failed once the budget allows (a fleet-wide blip takes no group down).",
    )
    health_gateway_grace_s: NonNegFloat = Field(
        120, description="The gateway's word: a worker the gateway still lists healthy is failed for its /health "
        "only after the probes have failed for this long (the gateway's own checks run every "
        "--health-check-interval-secs, 60 s by default). 0: the controller's probes alone decide.",
    )

    def backoff_s(self, attempt: int) -> float:
        """Wait after the ``attempt``-th failure (1-based): 60, 120, 240, ... capped at the maximum."""
        return min(self.retry_backoff_max_s, self.retry_backoff_s * 2 ** max(0, attempt - 1))


# ---------------------------------------------------------------------------------- simulation
class Simulation(StrictModel):
    prefill_tokens_per_s: PosFloat = Field(2500, description="Prefill speed of one request (tokens/s).")
    decode_tokens_per_s: PosFloat = Field(20, description="Decode speed of one request (tokens/s).")
    startup_s: PosFloat = Field(600, description="Time from start to ready for a simulated group (seconds).")
    startup_jitter_s: NonNegFloat = Field(0, description="Uniform +/- jitter on startup_s (seconds).")
    scrape_interval_s: PosFloat = Field(
        15, description="Simulated Prometheus scrape interval: the core sees load this old (seconds)."
    )
    kv_cache_tokens: Int = Field(
        300_000, ge=512, description="KV-cache capacity of one group in tokens (prefix cache and running requests)."
    )
    balance_abs_threshold: Int = Field(
        4, ge=0, description="The gateway's --balance-abs-threshold: a sticky session moves when its group "
        "has this many more requests than the least-loaded one.",
    )
    cache_threshold: Fraction = Field(
        0.5, description="The gateway's --cache-threshold: a prefix match above this share routes to that group."
    )


# -------------------------------------------------------------------------------------- policy
class Policy(StrictModel):
    fleet: Fleet = Field(description="The groups and nodes, floor and ceiling.")
    slo: Slo = Field(default_factory=Slo, description="The latency target.")
    scaling: Scaling = Field(default_factory=Scaling, description="How to scale.")
    schedules: Schedules = Field(default_factory=Schedules, description="Calendar windows, freezes and a pin.")
    forecast: Forecast = Field(default_factory=Forecast, description="Forecast of demand over the lead time.")
    cost: Cost = Field(default_factory=Cost, description="The cost model for the ledger and reports.")
    signals: Signals = Field(default_factory=Signals, description="Where the load signals come from (PromQL).")
    drain: Drain = Field(default_factory=Drain, description="How a group is drained before it stops.")
    actuator: Actuator = Field(default_factory=Actuator, description="How groups are started and stopped.")
    lifecycle: LifecycleRules = Field(
        default_factory=LifecycleRules, description="Deadlines, retries and health rules of a group's life."
    )
    simulation: Simulation = Field(default_factory=Simulation, description="The fleet model used by backtests.")

    @model_validator(mode="after")
    def _rules(self) -> Policy:
        n = len(self.fleet.groups)
        for i, w in enumerate(self.schedules.windows):
            for field in ("floor_groups", "ceiling_groups"):
                value = getattr(w, field)
                if value is not None and value > n:
                    raise FieldError(f"schedules.windows[{i}].{field}", f"{value} is above the {n} groups defined")
            if w.floor_groups is not None and w.floor_groups > self.fleet.ceiling_groups:
                raise FieldError(f"schedules.windows[{i}].floor_groups",
                                 f"{w.floor_groups} is above fleet.ceiling_groups ({self.fleet.ceiling_groups})")
        if self.schedules.pin and self.schedules.pin.groups > n:
            raise FieldError("schedules.pin.groups", f"{self.schedules.pin.groups} is above the {n} groups defined")
        tick, window = self.scaling.tick_interval_s, self.forecast.trend_window_s
        if self.forecast.enabled and window <= 3 * tick:
            # The trend fits a line through the ticks of one window and needs four of them.
            raise FieldError("forecast.trend_window_s", f"{window:g} s holds at most 3 ticks of "
                             f"scaling.tick_interval_s ({tick:g} s); the trend needs 4: make it more than {3 * tick:g} s")
        if "minute_s" in self.forecast.model_fields_set and self.forecast.minute_s < tick:
            # A minute's mean needs samples: shorter than a tick, most minutes would have none. (The
            # default, 60 s, is what every policy had before the field existed, long ticks included.)
            raise FieldError("forecast.minute_s", f"{self.forecast.minute_s:g} s is shorter than "
                             f"scaling.tick_interval_s ({tick:g} s): a minute holds at least one tick")
        return self
