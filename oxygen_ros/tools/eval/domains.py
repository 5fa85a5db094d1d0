"""ROS_DOMAIN_IDs for worker actors, so that concurrent sim tasks cannot see each other.

A sim task starts the sim node and the oxygen node as processes and records their topics
in its worker (tools.sim.evaluate); two tasks on one machine on the same DDS domain would
execute each other's trajectories and record each other's episodes. So the driver gives
every worker actor it creates its own domain id, which that actor's sim tasks run on (the
sim, the node and the recorder), and takes it back when it retires the actor.

Ids are 1..100 (well inside DDS's usable 0..232; the range ad-hoc ROS runs draw from).
The pool hands them out in rotation from a first id: $ROS_DOMAIN_ID of the driver when
it is set (an operator who keeps a block of ids free sets it to the block's start), else
a random one, so that two oxygen-eval manifest runs started on one machine are unlikely to start
on the same ids. An id whose worker died is "tainted": that worker's sim and node
processes may outlive it for a while (nothing kills them with their parent), so the pool
hands it out again only when every clean id is in use. More than 100 actors at once
cannot get distinct ids: the pool raises instead of sharing one.
"""

from __future__ import annotations

import collections
import os
import random

LOW, HIGH = 1, 100


class DomainPool:
    """Distinct ROS_DOMAIN_IDs for the actors alive at once."""

    def __init__(self, first: int | None = None) -> None:
        if first is None:
            first = _from_env() or random.randint(LOW, HIGH)
        if not LOW <= first <= HIGH:
            raise ValueError(f"a first ROS_DOMAIN_ID must be in {LOW}..{HIGH}, got {first}")
        ids = list(range(LOW, HIGH + 1))
        offset = first - LOW
        self._free = collections.deque(ids[offset:] + ids[:offset])
        self._tainted: collections.deque[int] = collections.deque()
        self._used: set[int] = set()

    def acquire(self) -> int:
        """A domain id no live actor has; clean ids first, each round in rotation."""
        queue = self._free or self._tainted
        if not queue:
            raise RuntimeError(
                f"more than {HIGH - LOW + 1} workers at once need distinct ROS_DOMAIN_IDs"
            )
        domain = queue.popleft()
        self._used.add(domain)
        return domain

    def release(self, domain: int, tainted: bool = False) -> None:
        """An actor is gone; `tainted` when it died, so its children may still be on it."""
        self._used.remove(domain)
        (self._tainted if tainted else self._free).append(domain)


def _from_env() -> int | None:
    value = os.environ.get("ROS_DOMAIN_ID", "")
    return int(value) if value.isdigit() and LOW <= int(value) <= HIGH else None
