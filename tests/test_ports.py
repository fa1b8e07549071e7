"""Free ports for child processes: below the ephemeral range, claimed for the hold, never one in use."""

import multiprocessing
import os
import socket
import time
from pathlib import Path

from autoscaler.demo import ports
from autoscaler.demo.ports import ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice_within_the_hold(tmp_path):
    picked = [free_port(claims=tmp_path) for _ in range(300)]
    low = ephemeral_low()
    assert all(low - ports.SPAN <= p < low for p in picked), [p for p in picked if not low - ports.SPAN <= p < low]
    assert len(set(picked)) == len(picked)  # 300 random picks of 12,000 collide with odds near 98% unclaimed
    assert all((tmp_path / str(p)).exists() for p in picked)


def _pick_many(claims: str, n: int) -> list[int]:
    return [free_port(claims=Path(claims)) for _ in range(n)]


def test_pickers_in_processes_at_once_never_share_a_port(tmp_path, monkeypatch):
    # 4 processes x 40 picks from 300 ports: without the lock two of them claim one port most runs.
    monkeypatch.setattr(ports, "SPAN", 300)
    with multiprocessing.get_context("fork").Pool(4) as pool:
        got = [p for picks in pool.starmap(_pick_many, [(str(tmp_path), 40)] * 4) for p in picks]
    assert len(got) == 160 and len(set(got)) == 160, sorted(p for p in got if got.count(p) > 1)


def _offer(monkeypatch, offers):
    it = iter(offers)
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 65536)
    monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(it))


def test_a_port_in_use_or_claimed_within_the_hold_is_skipped_and_an_expired_claim_is_not(tmp_path, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        held.listen()
        near = [p for p in range(busy - 1, busy - 200, -1) if ports._bindable("127.0.0.1", p)]
        claimed, expired = near[0], near[1]
        (tmp_path / str(claimed)).touch()
        os.utime(tmp_path / str(claimed), (time.time() - ports.HOLD_S + 60,) * 2)  # claimed nine minutes ago
        (tmp_path / str(expired)).touch()
        os.utime(tmp_path / str(expired), (time.time() - ports.HOLD_S - 1,) * 2)  # the hold is over
        _offer(monkeypatch, [busy, claimed, busy, claimed, expired])
        got = free_port(claims=tmp_path)
    assert got == expired, got
    assert time.time() - (tmp_path / str(expired)).stat().st_mtime < 60  # claimed afresh


def test_a_claims_folder_that_cannot_be_used_falls_back_to_the_kernels_pick(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(ports, "_warned", [False])
    port = free_port(claims=blocker)
    assert 0 < port < 65536
    assert "cannot be used" in caplog.text
