"""Policies: every shipped file loads; each rule rejects with FILE: field.path: value and rule; the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from autoscaler.policy import PolicyInvalid, load_policy, parse_policy
from autoscaler.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = (ROOT / "policies/default.yaml").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "policies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_policy_loads(path):
    loaded = load_policy(path)
    assert loaded.policy.fleet.groups and len(loaded.sha256) == 64


def test_default_policy_is_the_production_fleet():
    p = load_policy(ROOT / "policies/default.yaml").policy
    assert (p.fleet.floor_groups, p.fleet.ceiling_groups, p.fleet.requests_per_group) == (1, 3, 6)
    assert [len(g.nodes) for g in p.fleet.groups] == [2, 2, 2]
    assert (p.slo.ttft_target_s, p.slo.ttft_percentile) == (3.0, 99)


def test_the_models_default_budget_is_the_shipped_one():
    # The core's rule tests (tests/core_helpers.py) run on the model's default error budget; the
    # cross-validation chose the shipped file's. A policy that leaves the budget out gets the same.
    from autoscaler.policy.model import Slo

    shipped = load_policy(ROOT / "policies/default.yaml").policy.slo.capacity_miss_budget_pct
    assert Slo().capacity_miss_budget_pct == shipped == 0.4


def edit(path: str, value) -> str:
    """The default policy with one dotted path set (a list index as a number)."""
    data = yaml.safe_load(DEFAULT)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node.setdefault(k, {})
    last = keys[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("fleet.floor_groups", 4, "x.yaml: fleet.floor_groups: 4 is above fleet.ceiling_groups (3)"),
        ("fleet.floor_groups", 0, "x.yaml: fleet.floor_groups: 0: Input should be greater than or equal to 1"),
        ("fleet.group_size_nodes", 3, "x.yaml: fleet.group_size_nodes: 3 does not divide fleet.model_kv_heads (8)"),
        ("fleet.groups.1.nodes.0.name", "spark-1",
         "x.yaml: fleet.groups[1].nodes[0]: node 'spark-1' is also in group 'g1'; groups are fixed, disjoint node sets"),
        ("fleet.groups.2.nodes", [{"name": "spark-5", "address": "10.0.0.15"}],
         "x.yaml: fleet.groups[2].nodes: group 'g3' has 1 nodes; fleet.group_size_nodes is 2"),
        ("fleet.groups.0.worker_url", "http://10.0.0.11:30000/",
         "x.yaml: fleet.groups[0].worker_url: 'http://10.0.0.11:30000/' must have no path, query or trailing slash"),
        ("fleet.ceiling_groups", 4, "x.yaml: fleet.ceiling_groups: 4 is above the number of groups defined (3)"),
        ("fleet.flor_groups", 1, "x.yaml: fleet.flor_groups: unknown field"),
        ("scaling.tick_interval_s", -5, "x.yaml: scaling.tick_interval_s: -5: Input should be greater than 0"),
        ("scaling.tick_interval_s", "fast", "x.yaml: scaling.tick_interval_s: 'fast': Input should be a valid number"),
        ("cost.energy_price_per_kwh", -0.1,
         "x.yaml: cost.energy_price_per_kwh: -0.1: Input should be greater than or equal to 0"),
        ("drain.timeout_s", 0, "x.yaml: drain.timeout_s: 0: Input should be greater than 0"),
        ("drain.on_timeout", "explode", "x.yaml: drain.on_timeout: 'explode': Input should be 'stop' or 'keep_serving'"),
        ("schedules.timezone", "Mars/Base",
         "x.yaml: schedules.timezone: 'Mars/Base' is not an IANA time zone (e.g. UTC, Europe/Berlin)"),
        ("schedules.windows", [{"name": "w", "days": ["mon"], "start": "25:00", "end": "06:00", "floor_groups": 2}],
         "x.yaml: schedules.windows[0].start: '25:00' is not a time of day HH:MM (00:00-23:59)"),
        ("schedules.windows", [{"name": "w", "days": ["monday"], "start": "08:00", "end": "18:00", "floor_groups": 2}],
         "x.yaml: schedules.windows[0].days: 'monday' is not a weekday; use mon, tue, wed, thu, fri, sat, sun"),
        ("schedules.windows", [{"name": "w", "start": "08:00", "end": "18:00"}],
         "x.yaml: schedules.windows[0].floor_groups: a schedule window must set floor_groups, ceiling_groups or both"),
        ("schedules.windows", [{"name": "w", "start": "08:00", "end": "18:00", "floor_groups": 5}],
         "x.yaml: schedules.windows[0].floor_groups: 5 is above the 3 groups defined"),
        ("fleet.floor_groups", "2", "x.yaml: fleet.floor_groups: '2': Input should be a valid integer"),
        ("fleet.floor_groups", True, "x.yaml: fleet.floor_groups: True: Input should be a valid integer"),
        ("forecast.enabled", "yes", "x.yaml: forecast.enabled: 'yes': Input should be a valid boolean"),
        ("slo.ttft_target_s", "3", "x.yaml: slo.ttft_target_s: '3': Input should be a valid number"),
        ("schedules.windows", [{"name": "w", "start": "08:00", "end": "18:00", "floor_groups": 3}],
         None),  # floor 3 = ceiling 3: valid
        ("slo.capacity_miss_budget_pct", 0, "x.yaml: slo.capacity_miss_budget_pct: 0: Input should be greater than 0"),
        ("slo.capacity_miss_budget_pct", 101,
         "x.yaml: slo.capacity_miss_budget_pct: 101: Input should be less than or equal to 100"),
        ("slo.capacity_miss_budget_pct", 2.5, None),
        ("signals.metric_prefix", "sglang-", "x.yaml: signals.metric_prefix: 'sglang-': String should match pattern"),
        ("signals.queries", {"runing": "x"},
         "x.yaml: signals.queries: unknown signal 'runing'; signals are running, queued, kv_usage"),
    ],
)
def test_each_rule_names_file_field_value_and_rule(path, value, expected):
    if expected is None:
        parse_policy(edit(path, value), "x.yaml")
        return
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(edit(path, value), "x.yaml")
    assert any(line.startswith(expected) for line in exc.value.errors), exc.value.errors


@pytest.mark.parametrize("target, below, expected", [
    # the example: add a group above 0.5, drain below 0.55 -> demand between them flaps
    (0.5, 0.55, "x.yaml: scaling.scale_down.utilization_below: 0.55 is at or above scaling.target_utilization "
                "(0.5): the scale-up point must be above the scale-down point"),
    (0.7, 0.7, "x.yaml: scaling.scale_down.utilization_below: 0.7 is at or above scaling.target_utilization (0.7)"),
    (1.0, 1.0, "x.yaml: scaling.scale_down.utilization_below: 1 is at or above scaling.target_utilization (1)"),
    (0.7, 0.69, None),  # just below: valid
    (1.0, 0.55, None),
])
def test_a_policy_that_would_flap_is_rejected(target, below, expected):
    data = yaml.safe_load(edit("scaling.target_utilization", target))
    data["scaling"]["scale_down"]["utilization_below"] = below
    text = yaml.safe_dump(data)
    if expected is None:
        parse_policy(text, "x.yaml")
        return
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(text, "x.yaml")
    assert any(line.startswith(expected) for line in exc.value.errors), exc.value.errors


def test_a_schedule_floor_above_the_fleet_ceiling_is_rejected():
    text = edit("fleet.ceiling_groups", 2)
    data = yaml.safe_load(text)
    data["schedules"]["windows"] = [{"name": "w", "start": "08:00", "end": "18:00", "floor_groups": 3}]
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(yaml.safe_dump(data), "x.yaml")
    assert exc.value.errors == ["x.yaml: schedules.windows[0].floor_groups: 3 is above fleet.ceiling_groups (2)"]


@pytest.mark.parametrize("tick, window, error", [
    (15, 600, None),
    (150, 600, None),  # 4 ticks a window: the trend can fit
    (200, 600, "x.yaml: forecast.trend_window_s: 600 s holds at most 3 ticks of scaling.tick_interval_s (200 s); "
               "the trend needs 4: make it more than 600 s"),
])
def test_a_trend_window_too_short_for_the_tick_is_rejected(tick, window, error):
    data = yaml.safe_load(edit("scaling.tick_interval_s", tick))
    data["forecast"]["trend_window_s"] = window
    if error is None:
        parse_policy(yaml.safe_dump(data), "x.yaml")
        return
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(yaml.safe_dump(data), "x.yaml")
    assert exc.value.errors == [error]
    data["forecast"]["enabled"] = False  # no forecast: no trend to starve
    parse_policy(yaml.safe_dump(data), "x.yaml")


def test_a_duplicate_key_is_an_error_with_its_line():
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy("fleet:\n  floor_groups: 1\n  floor_groups: 2\n", "x.yaml")
    assert exc.value.errors == ["x.yaml:3: yaml: duplicate key 'floor_groups' (first on line 2)"]


def test_all_errors_are_reported_at_once():
    text = edit("cost.pue", 0.5)
    text = text.replace("scaling:\n", "scaling:\n  bogus: 1\n", 1)
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(text, "x.yaml")
    assert len(exc.value.errors) == 2


def test_a_pin_in_the_past_is_inactive_not_invalid():
    p = parse_policy(edit("schedules.pin", {"groups": 2, "until": "2001-01-01T00:00:00"}), "x.yaml")
    assert p.schedules.pin.until.year == 2001


def test_yaml_syntax_error_names_the_line():
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy("fleet:\n  floor_groups: 1\n   ceiling: 2\n", "x.yaml")
    assert exc.value.errors == ["x.yaml:3: yaml: mapping values are not allowed here"]


def test_validators_reject_and_never_rewrite():
    p = parse_policy(DEFAULT, "x.yaml")
    assert p.model_dump(mode="json")["fleet"]["groups"][0]["worker_url"] == "http://10.0.0.11:30000"
    with pytest.raises(ValidationError):
        p.fleet.floor_groups = 2  # frozen


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_validate_cli_exit_codes_and_lines(tmp_path):
    good = ROOT / "policies/default.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit("fleet.floor_groups", 4))
    p = cli("policy", "validate", str(good))
    assert p.returncode == 0 and "ok" in p.stdout
    p = cli("policy", "validate", str(good), str(bad))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"{bad}: fleet.floor_groups: 4 is above fleet.ceiling_groups (3)"]
    p = cli("policy", "validate", str(tmp_path / "missing.yaml"))
    assert p.returncode == 2 and "missing.yaml: cannot read" in p.stderr


def test_show_fills_every_default():
    p = cli("policy", "show", "policies/default.yaml", "--json")
    assert p.returncode == 0
    shown = json.loads(p.stdout)
    assert shown["drain"]["poll_interval_s"] == 2.0  # not in the file: the default
    assert set(shown) == {"fleet", "slo", "scaling", "schedules", "forecast", "cost", "signals", "drain", "actuator",
                          "lifecycle", "simulation"}
    assert "running" in shown["signals"]["queries"]
    # The live side's defaults: advisory acts on nothing; lifecycle deadlines and retries are filled in.
    assert shown["actuator"]["kind"] == "advisory" and shown["drain"]["settle_s"] == 2.0
    assert shown["lifecycle"]["start_retries"] == 3 and shown["lifecycle"]["health_failures_before_failed"] == 3


def test_settings_flags_env_defaults_and_secret_is_hidden(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret\n")
    env = {"AUTOSCALER_PROMETHEUS_URL": "http://prom:9090/", "AUTOSCALER_GATEWAY_API_KEY_FILE": str(key_file),
           "AUTOSCALER_DATABASE_URL": "postgresql://u:pw@db/ledger"}
    s = load_settings(prometheus=None, gateway="http://gw:30000", env=env)
    assert (s.prometheus_url, s.gateway_url, s.gateway_api_key) == ("http://prom:9090", "http://gw:30000", "s3cret")
    assert "s3cret" not in repr(s) and "pw" not in repr(s) and "***" in repr(s)
    assert load_settings(env={}).database_url == "sqlite:///autoscaler.db"


def test_decide_cli(tmp_path):
    p = cli("decide", "--policy", "policies/default.yaml", "--snapshot", "examples/snapshots/busy-morning.json", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert set(d) == {"action", "target_groups", "group", "reason", "detail", "inputs"}
    # demand 6 + 3 = 9 over 1 ready group at 6 x 1.0 per group -> ceil(9 / 6) = 2 groups; but the
    # tick's queue (a 3.3 s wait for every arrival) burns the 0.4% budget (13.5 + 10) / (13.5 + 2,500) / 0.4% = 2.34x on a
    # fresh memory (the prior: 10 misses in 10 / budget arrivals),
    # so a group counts for 6 / 2 = 3 (the headroom): ceil(9 / 3) = 3 groups, start g2 and g3
    assert (d["action"], d["target_groups"], d["group"], d["reason"]) == ("scale_up", 3, "g2", "utilization_high")
    assert d["inputs"]["headroom"] == 2.0 and d["inputs"]["budget_burn"] == pytest.approx(2.3374, abs=0.0001)
    bad = tmp_path / "snap.json"
    bad.write_text(json.dumps({"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {"g9": {"phase": "ready"}}}}))
    p = cli("decide", "--policy", "policies/default.yaml", "--snapshot", str(bad))
    assert p.returncode == 2 and f"{bad}: fleet.groups.g9: no such group in the policy" in p.stderr
    bad.write_text("{not json")
    p = cli("decide", "--policy", "policies/default.yaml", "--snapshot", str(bad))
    assert p.returncode == 2 and f"{bad}:1: json:" in p.stderr
    # --at overrides the snapshot's time; the memory chains
    mem = tmp_path / "mem.json"
    p = cli("decide", "--policy", "policies/default.yaml", "--snapshot", "examples/snapshots/busy-morning.json",
            "--at", "2026-01-06T09:00:00", "--memory-out", str(mem))
    assert p.returncode == 0 and "at 2026-01-06T09:00:00Z" in p.stdout
    assert json.loads(mem.read_text())["last_scale_up_at"] == "2026-01-06T09:00:00Z"


@pytest.mark.parametrize(
    "memory, expected",
    [
        ({"demand_by_slot": {"abc": 1}}, "memory.demand_by_slot.abc: a slot is a whole number"),
        ({"demand_samples": [5]}, "memory.demand_samples[0]: 5 is not [time, demand]"),
        ({"startup_durations_s": [None]}, "memory.startup_durations_s[0]: null is not a number"),
        ({"disruptions": "x"}, "memory.disruptions: expected a list, got str"),
    ],
)
def test_bad_memory_in_a_snapshot_is_bad_input(tmp_path, memory, expected):
    from autoscaler.adapters.snapshot_file import load_snapshot
    from autoscaler.errors import BadInput

    snap = tmp_path / "s.json"
    snap.write_text(json.dumps({"at": "2026-01-05T09:00:00Z", "fleet": {"groups": {}}, "memory": memory}))
    policy = load_policy(ROOT / "policies/default.yaml").policy
    with pytest.raises(BadInput) as exc:
        load_snapshot(str(snap), policy)
    assert str(exc.value).startswith(f"{snap}: {expected}")
