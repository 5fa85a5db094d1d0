"""oxygen-eval manifest's ROS_DOMAIN_IDs: distinct for live workers, in rotation, a dead
one's last."""

from __future__ import annotations

import pytest

from oxygen_ros.tools.eval.domains import DomainPool


def test_live_workers_get_distinct_ids_in_rotation() -> None:
    pool = DomainPool(first=99)
    assert [pool.acquire() for _ in range(3)] == [99, 100, 1]
    pool.release(100)
    # Released ids go to the back: the next ones are the untouched 2, 3, ...
    assert [pool.acquire() for _ in range(2)] == [2, 3]


def test_a_dead_workers_id_is_handed_out_only_when_no_clean_one_is_left() -> None:
    pool = DomainPool(first=1)
    held = [pool.acquire() for _ in range(100)]
    assert sorted(held) == list(range(1, 101))
    with pytest.raises(RuntimeError, match="more than 100 workers at once"):
        pool.acquire()
    pool.release(5, tainted=True)
    pool.release(6)
    assert pool.acquire() == 6  # clean first
    assert pool.acquire() == 5  # then the tainted one, rather than failing


def test_first_id_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROS_DOMAIN_ID", "42")
    assert DomainPool().acquire() == 42
    monkeypatch.setenv("ROS_DOMAIN_ID", "0")  # outside 1..100: a random start
    assert 1 <= DomainPool().acquire() <= 100
    with pytest.raises(ValueError, match="must be in 1..100"):
        DomainPool(first=101)
