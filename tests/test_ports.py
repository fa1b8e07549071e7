"""Free ports for child processes: below the ephemeral range, claimed, and never one in use."""

import socket

from autoscaler.demo import ports
from autoscaler.demo.ports import ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice_within_the_hold(tmp_path):
    picked = [free_port(claims=tmp_path) for _ in range(300)]
    low = ephemeral_low()
    assert all(low - ports.SPAN <= p < low for p in picked), [p for p in picked if not low - ports.SPAN <= p < low]
    assert len(set(picked)) == len(picked)  # 300 random picks of 12,000 collide with odds near 98% unclaimed
    assert len(list(tmp_path.iterdir())) == 300


def test_a_port_in_use_or_claimed_by_another_process_is_skipped(tmp_path, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        held.listen()
        claimed = busy + 1 if busy + 1 < 65536 else busy - 1
        (tmp_path / f"{claimed}.{int(ports.time.time() // ports.HOLD_S)}").touch()
        rest = list(range(busy - 2, busy - 40, -1))  # free, most likely: the first that is comes back
        offers = iter([busy, claimed, busy, claimed] * 3 + rest)
        monkeypatch.setattr(ports, "ephemeral_low", lambda: 65536)
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(offers))
        got = free_port(claims=tmp_path)
    assert got not in (busy, claimed) and got in rest, got
