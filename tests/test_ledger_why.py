"""`autoscaler why`: the fleet at an instant and the decisions that made it so."""

from __future__ import annotations

import json

import pytest

from autoscaler.cli import main
from autoscaler.ledger.store import Ledger
from tests.support.ledger_runs import T0, H, record_bulk, record_live
from tests.support.postgres import db_url, pg_server, pg_url  # noqa: F401  (fixtures)


def why_json(capsys, url, *args):
    assert main(["why", "--db", url, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _decision_at(ledger: Ledger, run: int, at: float):
    (d,) = [d for d in ledger.decisions(run, start=at, end=at)]
    return d


def test_why_was_g3_on_at_three_names_the_decision_that_started_it(db_url, capsys):
    with Ledger(db_url) as ledger:
        run = record_live(ledger)
        start_g3 = _decision_at(ledger, run, T0 + 2.5 * H)  # scale_up forecast_high at 02:30
    answer = why_json(capsys, db_url, "--at", "2026-01-05T03:00:00Z", "--group", "g3")
    (g3,) = answer["groups"]
    assert g3["group"] == "g3" and g3["on"] is True and g3["phase"] == "ready"
    assert g3["since"] == "2026-01-05T02:45:00Z"
    assert g3["cause"]["id"] == start_g3.id
    assert (g3["cause"]["action"], g3["cause"]["reason"]) == ("scale_up", "forecast_high")
    assert g3["cause"]["numbers"]["demand"] == start_g3.inputs["demand"]
    assert g3["holds_since"] == {"steady": 2}  # 02:45 and 03:00 held
    assert [n["state"] for n in g3["nodes"]] == ["active", "active"]
    # in plain words
    assert main(["why", "--db", db_url, "--at", "2026-01-05T03:00:00Z", "--group", "g3"]) == 0
    text = capsys.readouterr().out
    assert "g3 was ON (ready since 2026-01-05T02:45:00Z" in text
    assert f"It was started at 2026-01-05T02:30:00Z by decision #{start_g3.id}" in text
    assert "scale_up (forecast_high)" in text and "demand " in text


def test_an_off_group_names_the_drain_and_its_power_state(db_url, capsys):
    with Ledger(db_url) as ledger:
        run = record_live(ledger)
        drain = _decision_at(ledger, run, T0 + 1 * H)
    answer = why_json(capsys, db_url, "--at", "2026-01-05T01:30:00Z")
    groups = {g["group"]: g for g in answer["groups"]}
    assert set(groups) == {"g1", "g2", "g3"}
    g2 = groups["g2"]
    assert g2["on"] is False and g2["phase"] == "off" and g2["cause"]["id"] == drain.id
    assert [n["state"] for n in g2["nodes"]] == ["off", "off"]
    assert "already on when run" in groups["g1"]["explanation"]
    assert answer["active_nodes"] == 2  # only g1
    assert [d["at"] for d in answer["last_decisions"]][-1] == "2026-01-05T01:30:00Z"


def test_a_range_lists_the_decisions_that_acted_and_what_they_caused(db_url, capsys):
    with Ledger(db_url) as ledger:
        record_live(ledger)
    answer = why_json(capsys, db_url, "--from", "2026-01-05T00:00:00Z", "--to", "2026-01-05T12:00:00Z")
    acted = [(d["at"], d["action"], d["reason"], d["group"]) for d in answer["decisions"]]
    assert acted == [
        ("2026-01-05T01:00:00Z", "scale_down", "surplus", "g2"),
        ("2026-01-05T02:30:00Z", "scale_up", "forecast_high", "g3"),
        ("2026-01-05T08:00:00Z", "scale_up", "utilization_high", "g2"),
    ]
    assert answer["decisions"][1]["events"] == [{"group": "g3", "event": "started", "at": "2026-01-05T02:30:00Z"}]
    only_g3 = why_json(capsys, db_url, "--from", "2026-01-05T00:00:00Z", "--to", "2026-01-06T00:00:00Z",
                       "--group", "g3")
    assert [d["reason"] for d in only_g3["decisions"]] == ["forecast_high", "surplus"]


def test_compacted_holds_still_explain_why_a_group_stayed_on(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Ledger(url) as ledger:
        record_live(ledger)
        before = ledger.hold_counts(1, T0 + 2.75 * H, T0 + 20 * H)
        ledger.compact(older_than_s=0, now=T0 + 48 * H)
        after = ledger.hold_counts(1, T0 + 2.75 * H, T0 + 20 * H)
    # 02:45 .. 20:00 every 15 min = 70 ticks, minus 08:00 and 20:00 that acted = 68 holds
    assert before["steady"] == 68
    # after folding, only whole hours inside the range count: hours 03..19 = 17 x 4 = 68 ticks,
    # less 08:00 that acted = 67 (02:45 was folded into hour 02, which starts before the range)
    assert after["steady"] == 67
    answer = why_json(capsys, url, "--at", "2026-01-05T12:00:00Z", "--group", "g3")
    assert answer["groups"][0]["cause"]["reason"] == "forecast_high"  # acted decisions are kept


def test_several_simulations_covering_the_instant_need_run(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Ledger(url) as ledger:
        a = record_bulk(ledger, hours=24)
        record_bulk(ledger, hours=24)
    assert main(["why", "--db", url, "--at", "2026-01-05T03:00:00Z", "--source", "simulation"]) == 2
    assert "pick one with --run" in capsys.readouterr().err
    answer = why_json(capsys, url, "--at", "2026-01-05T03:00:00Z", "--source", "simulation", "--run", str(a),
                      "--group", "g3")
    assert answer["run"]["id"] == a and answer["groups"][0]["cause"]["reason"] == "forecast_high"


def test_nothing_recorded_then_and_bad_input(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    with Ledger(url) as ledger:
        record_live(ledger)
    answer = why_json(capsys, url, "--at", "2025-06-01T00:00:00Z")
    assert answer["run"] is None and "no live run was recording" in answer["message"]
    assert main(["why", "--db", url]) == 2
    assert main(["why", "--db", url, "--at", "2026-01-05T03:00:00Z", "--group", "g9"]) == 2
    assert "--group: 'g9' is not in run 1's fleet" in capsys.readouterr().err
    assert main(["why", "--db", url, "--from", "2026-01-06T00:00:00Z", "--to", "2026-01-05T00:00:00Z"]) == 2
    with pytest.raises(SystemExit) as exit_:  # a usage error: argparse exits 2
        main(["why", "--db", url, "--at", "not-a-time"])
    assert exit_.value.code == 2


def test_the_nodes_power_state_wins_over_a_missing_stop_event(tmp_path, capsys):
    from autoscaler.ledger.store import GroupEvent, NodeInterval
    from tests.support.ledger_runs import NODES, default_policy, make_decision

    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Ledger(url) as ledger:
        run = ledger.start_run("simulation", default_policy(), at=T0)
        drain = make_decision("scale_down", "surplus", 1, "g2", 1.0, 2)
        (did,) = ledger.record_bulk(
            run, decisions=[(T0 + 60, drain)],
            events=[GroupEvent(T0 + 60, "g2", "drain_started", decision_index=0)],  # no drained/stopped
            intervals=NodeInterval.for_group(NODES["g2"], "g2", "active", T0, T0 + 600)
            + NodeInterval.for_group(NODES["g2"], "g2", "off", T0 + 600, T0 + 7200),
        )
        ledger.end_run(run, T0 + 7200)
    answer = why_json(capsys, url, "--at", "2026-01-05T01:00:00Z", "--source", "simulation", "--group", "g2")
    g2 = answer["groups"][0]
    assert (g2["on"], g2["phase"], g2["since"]) == (False, "off", "2026-01-05T00:10:00Z")
    assert g2["cause"]["id"] == did and "last recorded event was drain started" in g2["explanation"]
