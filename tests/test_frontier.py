"""``autoscaler simulate --frontier`` (issue 37): one replay per SLO error budget beside the references.

The short trace is the demo's day of ServeGen (35,293 requests over 22 h at the default peak use 0.5),
where the budget moves the default policy: the larger the budget, the fewer node-hours and the more
SLO lost (the first test checks that it does, or the identities below would hold for any budget). On it:
- a point equals a single ``simulate --json --compare`` of the policy file with that budget, every key
  (wall time aside), its verdict included; the references equal those replayed under another budget;
- the recommended budget is the cheapest point within 0.5 pp of always-on, and its policy diff, applied
  with ``patch``, gives a policy whose single ``simulate`` reproduces the point's numbers;
- the money is the saved node-hours at the policy's prices (worked out below);
- the page (``--plot``) fits a 1280 px window in Debian's headless Chromium with its legend off the plot;
- bad input is one line and exit 2, before any replay.
The first day of the 14-day trace, counted into a worker's counters in Prometheus (as
docs/backtest-from-prometheus.md makes its history), gives the same identity through ``--from-prometheus``.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from autoscaler.cli.frontier_cmd import header, print_frontier, table_rows
from autoscaler.cli.frontier_plot import curves
from autoscaler.ledger.store import Ledger
from autoscaler.policy import load_policy
from autoscaler.sim import frontier as fr
from autoscaler.sim.backtest import prepare_trace, reference_names
from tests.support.procs import PYTHON, REPO, bad
from tests.support.prometheus import prepare
from tests.test_backtest_parallel import without_wall

POLICY = REPO / "policies/default.yaml"
DEMO_TRACE = str(REPO / "autoscaler/demo/trace")
AZURE = str(REPO / "examples/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv")
BUDGETS = "0.5,4,10"
# Keys every point shares with a single run's top level, printed once by the frontier.
SHARED = set(fr.SHARED_KEYS)


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "autoscaler", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def run_json(*args: str) -> dict:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def policy_file(folder: Path, budget: str, text: str | None = None) -> Path:
    """The default policy with its budget line written by hand (not by the code under test)."""
    text = POLICY.read_text() if text is None else text
    line = "  capacity_miss_budget_pct: 0.4  #"
    assert text.count(line) == 1
    path = folder / f"budget-{budget}.yaml"
    path.write_text(text.replace(line, f"  capacity_miss_budget_pct: {budget}  #"), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def frontier(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("frontier")
    page = folder / "frontier.html"
    # The policy's own budget (1%) is none of the three, so that the recommended one is a change.
    out = run_json("simulate", "--policy", str(policy_file(folder, "1")), "--trace", DEMO_TRACE, "--frontier",
                   BUDGETS, "--compare", "--plot", str(page))
    return out, page


def point(out: dict, budget: float) -> dict:
    return next(p for p in out["points"] if p["capacity_miss_budget_pct"] == budget)


# ------------------------------------------------------------------ a point is a single simulate
def test_the_budgets_move_the_policy_on_this_trace(frontier):
    out, _ = frontier
    assert [p["capacity_miss_budget_pct"] for p in out["points"]] == [0.5, 4, 10]
    node_hours = [p["node_hours"] for p in out["points"]]
    # Otherwise the identities below would hold for any budget handed to any replay.
    assert len(set(node_hours)) == 3 and node_hours == sorted(node_hours, reverse=True), node_hours


@pytest.mark.parametrize("budget", ["10", "0.5"])
def test_a_point_equals_a_single_simulate_of_that_budget(frontier, tmp_path, budget):
    out, _ = frontier
    single = run_json("simulate", "--policy", str(policy_file(tmp_path, budget)), "--trace", DEMO_TRACE, "--compare")
    p = dict(point(out, float(budget)))
    assert p.pop("capacity_miss_budget_pct") == float(budget)
    for key in ("money", "dominated_by_budget", "non_dominated"):  # the frontier's own additions
        p.pop(key)
    expected = {k: v for k, v in single.items() if k not in SHARED}
    assert without_wall(p) == without_wall(expected)
    # The keys the points share, once: the trace, the model, the warm-up, and the references, equal
    # to those the single run replayed (under budget 10 the cache keys differ: they were replayed again).
    for key in SHARED:
        assert without_wall(out[key]) == without_wall(single[key]), key


def test_the_recommendation_applied_reproduces_its_numbers(frontier, tmp_path):
    out, _ = frontier
    static_slo = out["reference"]["static"]["slo_attainment"]
    # The recommendation, derived here: the most node-hours saved within 0.5 pp of always-on.
    within = [p for p in out["points"] if static_slo - p["slo_attainment"] <= 0.005 + 1e-12]
    best = min(within, key=lambda p: (p["node_hours"], p["capacity_miss_budget_pct"]))
    assert best["savings_pct"] > 0 and len(within) < len(out["points"])  # a real choice on this trace
    rec = out["recommended"]
    assert rec["capacity_miss_budget_pct"] == best["capacity_miss_budget_pct"]
    assert f"budget {fr.budget_text(best['capacity_miss_budget_pct'])}% saves {best['savings_pct']:.2f}%" in rec["reason"]
    assert rec["reason"] == out["advice"]
    # Applied as an operator would: the diff onto a copy of the policy file, with patch(1).
    copy = tmp_path / "policy.yaml"
    source = rec["policy_diff"].splitlines()[0].removeprefix("--- ")
    shutil.copy(source, copy)
    diff = rec["policy_diff"].replace(source, "policy.yaml")
    done = subprocess.run(["patch", "-p0", "--no-backup-if-mismatch"], input=diff, text=True, cwd=tmp_path,
                          capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    changed = [line for line in rec["policy_diff"].splitlines() if line.startswith(("+ ", "- ", "+  ", "-  "))]
    assert len(changed) == 2, rec["policy_diff"]  # one line out, one line in: nothing else moved
    applied = run_json("simulate", "--policy", str(copy), "--trace", DEMO_TRACE)
    for key in ("requests", "node_hours", "savings_pct", "slo_attainment", "capacity_misses", "scale_ups",
                "scale_downs", "ttft_p99_s"):
        assert applied[key] == best[key], key


def test_the_money_is_the_saved_node_hours_at_the_policys_prices(frontier):
    out, _ = frontier
    p = point(out, 4)
    m = p["money"]
    # Default prices: a node-hour not run saves (240 - 3) W x 1.3 / 1000 x 0.15 USD/kWh = 0.046215 USD
    # (an advisory policy's stopped node is off: 3 W); fixed costs are paid either way.
    per_node_hour = Fraction(237) * Fraction(13, 10) / 1000 * Fraction(15, 100)
    saved = Fraction(str(p["baseline_node_hours"])) - Fraction(str(p["node_hours"]))
    span_h = Fraction(str(p["baseline_node_hours"])) / 6  # the ceiling's 6 nodes
    assert (m["currency"], m["stopped_power_state"]) == ("USD", "off")
    assert m["saving_variable"] == round(float(saved * per_node_hour), 2)
    assert m["saving_variable_per_month"] == round(float(saved * per_node_hour * 730 / span_h), 2)
    assert m["saving_variable_per_month"] > 0


def test_non_dominated_points_are_those_nothing_beats(frontier):
    out, _ = frontier
    pts = out["points"]
    for p in pts:
        cheaper_by_ours = [q for q in pts if q is not p and q["slo_attainment"] >= p["slo_attainment"] - 0.0001
                           and q["node_hours"] < 0.995 * p["node_hours"]]
        assert p["non_dominated"] == (not cheaper_by_ours and not p["verdict"]["dominated_by"]), p


def test_a_short_trace_is_warned_about(frontier):
    out, _ = frontier
    kinds = [w.split(":")[0] for w in out["warnings"]]
    assert kinds == ["too short", "too cold"], out["warnings"]  # 22 h: 35,293 requests are enough


def test_the_text_output_marks_points_and_recommends(frontier, capsys):
    out, _ = frontier
    policy = load_policy(POLICY).policy
    print_frontier(out, header("USD"), table_rows(out, policy))  # what the command prints without --json
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    rec = out["recommended"]["capacity_miss_budget_pct"]
    ours = [line for line in lines if line.startswith("ours ")]
    assert len(ours) == 3
    for p, line in zip(out["points"], ours):
        assert f"budget {fr.budget_text(p['capacity_miss_budget_pct'])}%" in line
        assert f"{p['savings_pct']:.2f}" in line and f"{100 * p['slo_attainment']:.3f}" in line
        assert line.rstrip().endswith("recommended") == (p["capacity_miss_budget_pct"] == rec)
        assert ("  *" in line) == p["non_dominated"]
    for name in ("always-on", "oracle", "HPA", "Knative KPA", "AIBrix APA", "Ray Serve", "Dynamo planner"):
        assert any(line.startswith(name + " ") for line in lines), name
    assert "recommendation: " + out["advice"] in lines
    assert f"+  capacity_miss_budget_pct: {fr.budget_text(rec)}  #" in stdout
    assert sum(line.startswith("warning: ") for line in lines) == 2


def test_a_time_constant_grid_names_both_values(frontier):
    """With ``--compare sweep`` a peer's grid crosses its target with a time constant: Knative KPA's
    target 0.5 at each scale-down delay is its own row (and point of the picture), named by both."""
    out, _ = frontier
    policy = load_policy(POLICY).policy
    kpa = out["reference"]["kpa"]
    # (the longer delay keeps more SLO and saves less: neither beats the other, both are drawn)
    grid = [{**kpa, "knob": "target_utilization", "target_utilization": 0.5, "time_knob": "scale_down_delay_s",
             "scale_down_delay_s": delay, "slo_attainment": kpa["slo_attainment"] + delay / 1e5,
             "savings_pct": kpa["savings_pct"] - delay / 100} for delay in (0.0, 300.0)]
    swept = {**out, "reference": {**out["reference"], "kpa_sweep": grid}}
    settings = [r[1] for r in table_rows(swept, policy) if r[0] == "Knative KPA"]
    assert settings == ["target 0.5, scale_down_delay_s 0", "target 0.5, scale_down_delay_s 300"]
    labels = [label for s in curves(swept) if s["name"] == "Knative KPA" for *_, label in s["points"]]
    assert sorted(labels) == ["0.5/0", "0.5/300"], labels
    # A setting another of the same peer beats (less saving for more SLO lost) is in the table, not the line.
    beaten = {**grid[1], "scale_down_delay_s": 900.0, "slo_attainment": grid[0]["slo_attainment"] - 0.01,
              "savings_pct": grid[0]["savings_pct"] - 5}
    swept["reference"]["kpa_sweep"] = grid + [beaten]
    assert len([r for r in table_rows(swept, policy) if r[0] == "Knative KPA"]) == 3
    labels = [label for s in curves(swept) if s["name"] == "Knative KPA" for *_, label in s["points"]]
    assert sorted(labels) == ["0.5/0", "0.5/300"], labels


# ------------------------------------------------------------------------------ the picture
def test_the_page_fits_a_real_browser_window(frontier, tmp_path):
    out, page = frontier
    text = page.read_text()
    assert text.count('class="ours non-dominated"') + text.count('class="ours dominated"') == 3
    assert text.count('id="recommended"') == 1 and 'id="plot-area"' in text and 'class="legend"' in text
    assert html.escape(out["advice"][1:]) in text
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.fail("chromium is not installed; scripts/bootstrap.sh --test installs Debian's chromium")
    shot = tmp_path / "frontier.png"
    done = subprocess.run([sys.executable, str(REPO / "scripts/report_screenshot.py"), str(page), str(shot),
                           "--height", "1500"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "legend clear of the plot" in done.stderr and shot.stat().st_size > 10_000


def test_an_svg_is_drawn_too(tmp_path):
    svg = tmp_path / "f.svg"
    done = cli("simulate", "--policy", str(POLICY), "--trace", AZURE, "--frontier", "1", "--compare",
               "--plot", str(svg))
    assert done.returncode == 0, done.stderr[-2000:]
    text = svg.read_text()
    assert text.startswith("<svg ") and text.rstrip().endswith("</svg>") and 'id="slo-bar"' in text


# ----------------------------------------------------------------------------- the policy text
def test_the_budget_is_written_into_the_policys_own_text():
    text = POLICY.read_text()
    new = fr.policy_text_with_budget(text, 2)
    diff = [line for line in new.splitlines() if line not in text.splitlines()]
    assert diff == ["  capacity_miss_budget_pct: 2  # share of requests that may miss the TTFT target because of "
                    "capacity: 80% of the SLO's own bar (0.5 pp of always-on), the margin for the burn's estimate "
                    "(docs/matrix.md)"]
    # No slo section: one is added; an slo block without the key: the key joins it.
    bare = "fleet:\n  floor_groups: 1\n"
    assert fr.policy_text_with_budget(bare, 0.25) == bare + "slo:\n  capacity_miss_budget_pct: 0.25\n"
    # Plain decimals: YAML would read 1e-05 as a string.
    assert fr.policy_with_budget(text, "p.yaml", 1e-05)[0].slo.capacity_miss_budget_pct == 1e-05
    block = "slo:\n    ttft_target_s: 2\nscaling: {}\n"
    assert fr.policy_text_with_budget(block, 4) == "slo:\n    capacity_miss_budget_pct: 4\n    ttft_target_s: 2\nscaling: {}\n"


def test_a_policy_with_that_budget_differs_in_the_budget_alone():
    text = POLICY.read_text()
    policy, _ = fr.policy_with_budget(text, "p.yaml", 0.1)
    base = load_policy(POLICY).policy
    assert policy.slo.capacity_miss_budget_pct == 0.1
    assert policy.model_dump() == {**base.model_dump(), "slo": {**base.slo.model_dump(), "capacity_miss_budget_pct": 0.1}}


# -------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("value", "needle"), [
    ("", "empty"), (" , ", "empty"), ("-1", "-1 is not a budget"), ("0", "0 is not a budget"),
    ("101", "101 is not a budget"), ("1,abc", "'abc' is not a number"), ("nan", "nan is not a budget"),
    ("1,,2", "'' is not a number"), ("1,1.0", "given twice"),
])
def test_a_bad_budget_list_is_one_line_and_exit_2(value, needle):
    bad(cli("simulate", "--policy", str(POLICY), "--trace", AZURE, f"--frontier={value}"), "--frontier", needle)


def test_a_warm_up_longer_than_the_trace_is_bad_input():
    bad(cli("simulate", "--policy", str(POLICY), "--trace", AZURE, "--frontier", "--warmup-hours", "2"),
        "--warmup-hours: 2 h is not shorter than the trace's span")


def test_an_output_onto_the_ledger_is_bad_input(tmp_path):
    ledger = tmp_path / "ledger.html"  # a database file whose name passes for a page
    url = f"sqlite:///{ledger}"
    with Ledger(url):
        pass
    done = subprocess.run([PYTHON, "-m", "autoscaler", "simulate", "--policy", str(POLICY), "--trace", AZURE,
                           "--frontier", "--plot", str(ledger)], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**__import__("os").environ, "AUTOSCALER_DATABASE_URL": url})
    bad(done, f"--plot: {ledger} is the ledger database")
    bad(cli("simulate", "--policy", str(POLICY), "--trace", AZURE, "--frontier", "--db", url), "--frontier: --db")
    bad(cli("simulate", "--policy", str(POLICY), "--trace", AZURE, "--frontier", "--timeline-out",
            str(tmp_path / "t.csv")), "--frontier: --timeline-out")


def test_a_flow_style_slo_section_is_bad_input(tmp_path):
    flow = tmp_path / "flow.yaml"
    text = POLICY.read_text()
    start = text.index("slo:\n")
    end = text.index("\nscaling:", start)
    flow.write_text(text[:start] + "slo: {ttft_target_s: 3.0, capacity_miss_budget_pct: 0.5}\n" + text[end:],
                    encoding="utf-8")
    assert load_policy(flow).policy.slo.capacity_miss_budget_pct == 0.5  # a valid policy
    bad(cli("simulate", "--policy", str(flow), "--trace", AZURE, "--frontier"), "--frontier", "slo section")


# ---------------------------------------------------------------------- the parallel replays
def test_the_parallel_replays_equal_the_serial_ones():
    loaded = load_policy(POLICY)
    trace, factor, _ = prepare_trace(DEMO_TRACE, "auto", loaded.policy, 0.5, 0)
    variants = {b: fr.policy_with_budget(loaded.text, str(POLICY), b)[0] for b in (0.5, 10)}
    skip = frozenset(reference_names(loaded.policy))  # ours alone: the references' parallel path is backtest's
    serial, runs1 = fr.run_points(trace, factor, variants, seed=0, warmup_s=0, sweep=False, skip=skip,
                                  first=0.5, workers=1)
    parallel, runs2 = fr.run_points(trace, factor, variants, seed=0, warmup_s=0, sweep=False, skip=skip,
                                    first=0.5, workers=2)
    assert without_wall(serial) == without_wall(parallel)
    assert set(runs1) == set(runs2) == {"ours"}
    assert len({s["node_hours"] for s in serial.values()}) == 2, serial


# --------------------------------------------------------------------------- from Prometheus
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A Prometheus holding the first day of the 14-day trace as g1's worker's counters (the history
    of docs/backtest-from-prometheus.md, built by the docs test's builder)."""
    from tests.test_docs import build_history

    folder = tmp_path_factory.mktemp("history")
    build_history(folder, hours=24)
    prom = prepare(folder, [])
    prom.start()
    yield prom
    prom.close()


def test_a_frontier_from_prometheus_history_equals_single_runs(recorded, tmp_path):
    text = POLICY.read_text()
    span = ("--from-prometheus", recorded.url, "--from", "2026-01-05T00:00:00Z", "--to", "2026-01-06T00:00:00Z")
    out = run_json("simulate", "--policy", str(POLICY), *span, "--frontier", "0.4,10", "--compare")
    assert out["trace"]["format"] == "prometheus" and out["trace"]["requests_read"] == 1440
    for budget, path in ((10.0, policy_file(tmp_path, "10", text)), (0.4, POLICY)):
        single = run_json("simulate", "--policy", str(path), *span, "--compare")
        p = {k: v for k, v in point(out, budget).items()
             if k not in ("capacity_miss_budget_pct", "money", "dominated_by_budget", "non_dominated")}
        assert without_wall(p) == without_wall({k: v for k, v in single.items() if k not in SHARED}), budget
        assert without_wall(out["reference"]) == without_wall(single["reference"])
    assert out["points"][0]["node_hours"] != out["points"][1]["node_hours"], out["points"]


def test_a_week_of_trust_is_the_core_memory_of_recent_rises_and_the_weeks_tail():
    # "too short" and "too cold" measure against the core's memory: the recent rises (three hours)
    # and the week's tail before them (165 hours): a week, 168 hours.
    from autoscaler.core.risk import RECENT_MINUTES, TAIL_HOURS
    from autoscaler.sim.frontier import WEEK_H

    assert WEEK_H == TAIL_HOURS + RECENT_MINUTES / 60 == 7 * 24
