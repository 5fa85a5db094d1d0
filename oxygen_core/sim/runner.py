"""Run the scripted expert on seeded episodes without ROS: the reference success rates.

The expert's joint targets go straight into `World.step` once per control period (no
trajectory executor in between), and the episode ends at the first success or at the
family's time limit in sim seconds. This is the same loop the ROS sim node runs, minus the
topics, so its success rate is what the expert achieves through the node when nothing is
lost in transport.
"""

from __future__ import annotations

import dataclasses

from oxygen_core.sim.expert import Expert
from oxygen_core.sim.tasks import make_task

DEFAULT_CONTROL_HZ = 20.0


@dataclasses.dataclass(frozen=True)
class EpisodeResult:
    family: str
    seed: int
    instruction: str
    success: bool
    time_to_success: float | None  # sim seconds; None on failure
    steps: int
    narration: tuple[str, ...]  # the distinct narration lines, in order
    memory: tuple[str, ...]


def run_expert_episode(
    family: str, seed: int, control_hz: float = DEFAULT_CONTROL_HZ
) -> EpisodeResult:
    """One expert episode from (family, seed) to success or the time limit."""
    task = make_task(family, seed)
    world = task.new_world()
    expert = Expert(task, world)
    dt = 1.0 / control_hz
    narration: list[str] = []
    memory: list[str] = []
    max_steps = int(round(task.time_limit * control_hz))
    # Observe, act, step, as a robot does: the expert sees the outcome of its last step
    # (and writes its memory line) in the same tick that the success check sees it.
    for step in range(max_steps + 1):
        out = expert.act(world, dt)
        if not narration or narration[-1] != out.narration:
            narration.append(out.narration)
        if out.memory:
            memory.append(out.memory)
        verdict = task.verdict(world)
        if verdict is not None:
            return EpisodeResult(
                family,
                seed,
                task.instruction,
                verdict,
                world.time if verdict else None,
                step,
                tuple(narration),
                tuple(memory),
            )
        if step < max_steps:
            world.step(out.targets, dt)
    return EpisodeResult(
        family, seed, task.instruction, False, None, max_steps, tuple(narration), tuple(memory)
    )


def run_expert(
    families: tuple[str, ...], seeds: list[int], control_hz: float = DEFAULT_CONTROL_HZ
) -> dict[str, list[EpisodeResult]]:
    """Every family on every seed."""
    return {f: [run_expert_episode(f, s, control_hz) for s in seeds] for f in families}
