"""The touch-probe baseline (oxygen_core.sim.touch_probe): what closed fingers feel, where
the readings put an object, and whole episodes driven by the joints alone."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.sim import contacts
from oxygen_core.sim.baselines import make_baseline
from oxygen_core.sim.scene import BOWL_RIM, SceneObject
from oxygen_core.sim.tasks import Task
from oxygen_core.sim.touch_probe import BOWL_READINGS, centre, reading, search_lattice
from oxygen_core.sim.world import PUSHER_RADIUS

DT = 0.05


@pytest.mark.parametrize(
    ("height", "felt"),
    [(0.044, "ball"), (0.0405, "block"), (0.040, "block"), (0.006, "floor"), (0.0, None)],
)
def test_a_height_reads_as_what_the_fingers_stand_on(height, felt):
    assert reading(height) == felt


def _felt(obj: SceneObject, xy: np.ndarray) -> str | None:
    stop = contacts.finger_stop(obj, xy, PUSHER_RADIUS)
    return None if stop is None else reading(stop)


@pytest.mark.parametrize("shape", ["ball", "block"])
def test_five_probes_put_a_shape_near_its_centre(shape):
    """A lattice hit and its cross, read as the world's fingers would: the estimate is
    within 2.5 cm of the centre (a block under all five probes is placed only that well:
    the grasp then retries beside it)."""
    rng = np.random.default_rng(3)
    obj = SceneObject("red", shape, np.zeros(3))
    radius = obj.radius + PUSHER_RADIUS
    for _ in range(50):
        obj.position = np.array([*rng.uniform(-radius, radius, 2) * 0.7, 0.0])
        probes = [np.array(d) * 0.02 for d in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))]
        cluster = [(p, _felt(obj, p)) for p in probes]
        if cluster[0][1] is None:
            continue
        estimate = centre(cluster, {shape: (0.0, radius), None: (radius, np.inf)})
        assert np.hypot(*(estimate - obj.position[:2])) < 0.025


def test_a_bowl_is_told_by_its_floor():
    bowl = SceneObject("blue", "bowl", np.array([0.01, -0.02, 0.0]))
    probes = [np.array(d) * 0.02 for d in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))]
    cluster = [(p, _felt(bowl, p)) for p in probes]
    assert "floor" in [felt for _, felt in cluster]
    estimate = centre(cluster, BOWL_READINGS)
    assert np.hypot(*(estimate - bowl.position[:2])) < BOWL_RIM - PUSHER_RADIUS


def _episode(task: Task, steps: int) -> tuple[bool | None, object]:
    """The baseline driving the world, a chunk every 2 steps from the measured joints."""
    probe, world = make_baseline("touch"), task.new_world()
    probe.reset(task.instruction)
    for step in range(steps):
        if step % 2 == 0:
            rows = probe.chunk(world.joints.copy(), step, 10)
        world.step(rows[step % 2], DT)
        verdict = task.verdict(world)
        if verdict is not None:
            return verdict, world
    return None, world


def _pick_beside(colour: str, shape: str) -> Task:
    """Pick the red ball 12 cm from an object of `colour` and `shape` at the first search
    probe."""
    first = search_lattice()[0]
    near = SceneObject(colour, shape, np.array([*first, 0.0]))
    ball = SceneObject("red", "ball", np.array([first[0] + 0.01, first[1] - 0.12, 0.0]))
    return Task("pick", 0, "pick up the red ball", (ball, near), 0)


def test_it_finds_and_lifts_the_instructed_shape_by_touch():
    """It passes the block the search meets first and lifts the ball."""
    verdict, world = _episode(_pick_beside("green", "block"), 200)
    assert verdict is True and world.held == 0


def test_it_cannot_tell_the_target_from_its_twin():
    """The blue ball lies where the search passes first: it is lifted, and that decides."""
    verdict, world = _episode(_pick_beside("blue", "ball"), 200)
    assert verdict is False and world.held == 1
