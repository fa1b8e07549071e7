"""The README's "How good it is" numbers are the benchmarks' last output (issue 21), with no replay:
the README section is what ``bench/readme_numbers.py`` renders from ``bench/results/``, the peers'
part of ``readme-numbers.json`` is what the script computes from the committed
``simulate --compare --json`` run, and docs/backtest.md's 14-day table shows that same run."""

from __future__ import annotations

import importlib.util
import json
import re

from tests.support.procs import REPO

spec = importlib.util.spec_from_file_location("readme_numbers", REPO / "bench" / "readme_numbers.py")
assert spec is not None and spec.loader is not None
readme_numbers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_numbers)

NUMBERS = json.loads(readme_numbers.NUMBERS.read_text())
RAW = json.loads(readme_numbers.COMPARE_RAW.read_text())


def test_the_readme_section_is_what_the_script_renders_from_the_results_file() -> None:
    section = readme_numbers.readme_section((REPO / "README.md").read_text())
    assert section, "README.md has no readme-numbers markers"
    assert section == readme_numbers.render(NUMBERS), (
        "README.md's 'How good it is' section differs from `.venv/bin/python bench/readme_numbers.py`: "
        "paste its output between the markers")
    assert readme_numbers.main(["--check"]) == 0


def test_the_peers_numbers_are_the_committed_compare_run() -> None:
    stored = {k: v for k, v in NUMBERS["compare"].items() if k != "source"}
    assert stored == readme_numbers.summarise_compare(RAW)
    assert RAW["requests"] == 302_557 and RAW["trace"]["format"] == "servegen"  # the 14-day m-small trace


def test_the_matrix_summary_adds_up_and_is_what_the_summariser_makes_of_a_cv_matrix_file() -> None:
    traces = NUMBERS["matrix"]["traces"]
    assert [t["trace"] for t in traces] == list(readme_numbers.SHORT.values())
    for t in traces:
        assert 0 <= t["out_of_sample"] <= t["cells"] and 0 <= t["in_sample"] <= t["cells"] == 9
        # a cell that meets all three misses none: the misses (of which a cell may have several) leave
        # at least cells - in_sample cells with one
        misses = t["slo_misses"] + t["rate_oracle_misses"] + t["hpa_dominated"] + t["peer_dominated"]
        assert misses >= t["cells"] - t["in_sample"]

    # bench/cv_matrix.py --json's shape: two candidates, one fold choosing the other on one trace
    def row(trace: str, candidate: int, meets: bool, slo: bool = True, peer: str | None = None,
            ours: float = 90.0, rate: float | None = None) -> dict:
        refs = {"static": {"node_hours": 100.0}, "oracle": {"node_hours": 80.0},
                "oracle_rate": None if rate is None else {"node_hours": rate}}
        verdict = {"meets_targets": meets, "slo_within_0_5pp_of_static": slo, "slo_gap_vs_static_pp": 0.1,
                   "within_rate_oracle": None if rate is None else ours <= rate,
                   "dominated_by_hpa": False, "peer_dominating": {"kpa": peer, "apa": None}}
        return {"trace": trace, "candidate": candidate, "verdict": verdict, "refs": refs,
                "ours": {"node_hours": ours}}

    cv = {"candidates": ["a", "b"], "chosen": 0, "folds": {"azure-2023-conv": 1, "servegen-m-small": 0},
          "results": [
              row("azure-2023-conv", 0, True),
              row("azure-2023-conv", 0, False, slo=False),
              row("azure-2023-conv", 1, False, peer="0.8"),
              row("azure-2023-conv", 1, False, slo=False),
              row("servegen-m-small", 0, False, peer="0.9", ours=95.0, rate=92.0),
              row("servegen-m-small", 1, True, rate=92.0)]}
    got = readme_numbers.summarise_matrix(cv)
    assert got["candidate"] == "a"
    # azure: always-on 200 node-hours over two cells, ours 180: 10% saved; the oracle 160: 20%
    assert got["traces"] == [
        {"trace": "azure-conv (1 h)", "cells": 2, "in_sample": 1, "out_of_sample": 0, "slo_misses": 1,
         "worst_gap_pp": 0.1, "saved_pct": 10.0, "rate_oracle_saved_pct": None, "oracle_saved_pct": 20.0,
         "rate_oracle_misses": 0, "hpa_dominated": 0, "peer_dominated": 0},
        {"trace": "m-small (14 d)", "cells": 1, "in_sample": 0, "out_of_sample": 0, "slo_misses": 0,
         "worst_gap_pp": 0.1, "saved_pct": 5.0, "rate_oracle_saved_pct": 8.0, "oracle_saved_pct": 20.0,
         "rate_oracle_misses": 1, "hpa_dominated": 0, "peer_dominated": 1}]


def test_the_14_day_table_in_docs_backtest_is_the_committed_run() -> None:
    text = (REPO / "docs" / "backtest.md").read_text()
    table = text[text.index("```text\ntrace: servegen"):]
    rows = {}
    for line in table.splitlines()[2:15]:
        label, *values = re.split(r"\s{2,}", line.strip())
        rows[label] = values
    keys = [None, "static", "hpa", "kpa", "apa", "aibrix_kpa", "ray_serve", "dynamo_planner", "oracle", "oracle_rate"]
    runs = [RAW if k is None else RAW["reference"][k] for k in keys]
    assert rows["node-hours"] == [f"{r['node_hours']:,.1f}" for r in runs]
    assert rows["SLO attainment %"] == [f"{100 * r['slo_attainment']:.3f}" for r in runs]
    assert rows["capacity misses"] == [f"{r['capacity_misses']:,}" for r in runs]
    assert rows["groups started"] == [f"{r['scale_ups']:,}" for r in runs]
