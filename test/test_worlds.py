"""The world interface (oxygen_core.worlds) as the one sim loop and host use it: each
world's binding names the topics the loop publishes by, its node parameters build its
world, and what a world cannot do (lockstep without frame numbers) is refused in one line."""

from __future__ import annotations

import pytest
from metaworld_harness import needs_metaworld

from oxygen_core.sim.episode import Tabletop, TabletopSettings
from oxygen_core.worlds import EXTERNAL, policies
from oxygen_ros.tools.commands import RECORD, SIM_HOST
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.node import parameters
from oxygen_ros.tools.sim.worlds import WORLDS, binding

# The keys the loop publishes by, whatever the world.
LOOP_KEYS = {"clock", "instruction", "episode", "narration", "memory"}

WORLD_PARAMS = [pytest.param(w, marks=needs_metaworld) if w == "metaworld" else w for w in WORLDS]


class Null:
    def publish(self, key, msg, time_ns) -> None:
        pass


@pytest.mark.parametrize("name", WORLD_PARAMS)
def test_a_binding_covers_what_the_loop_publishes_and_builds_its_world(name):
    b = binding(name)
    keys = {t.key for t in b.topics}
    world = b.world({p.name: p.default for p in parameters(b)})
    try:
        assert world.name == b.name == b.world_class.name == name
        assert LOOP_KEYS | {b.shown_key} | {f"camera/{c}" for c in world.cameras} <= keys
        assert policies(world) == (EXTERNAL, *b.world_class.sim_policies)
        assert set(b.names_parameter.default) == set(world.episode_names)
        assert len({p.name for p in parameters(b)}) == len(parameters(b))  # no name twice
    finally:
        world.close()


def test_every_world_has_its_sim_and_its_recorder():
    assert set(SIM_HOST.by_world) == set(RECORD.by_world) == set(WORLDS)


def test_what_a_world_cannot_do_is_refused_in_one_line():
    world = Tabletop(TabletopSettings(camera_size=16))
    one = episode_order(("pick",), 0, 1)
    with pytest.raises(ValueError, match="^tabletop's commands do not say their frame"):
        SimLoop(world, SimConfig(one, lockstep_ticks=2), Null())
    with pytest.raises(ValueError, match="^unknown tabletop episode 'reach-v3'"):
        SimLoop(world, SimConfig((("reach-v3", 0),)), Null())
    with pytest.raises(ValueError, match="^policy 'model' is not one of"):
        SimLoop(world, SimConfig(one, policy="model"), Null())
    with pytest.raises(ValueError, match="^camera_rate_hz 40.0 must be in"):
        SimLoop(world, SimConfig(one, camera_rate_hz=40.0), Null())
    with pytest.raises(ValueError, match="^unknown world 'mars'"):
        binding("mars")
