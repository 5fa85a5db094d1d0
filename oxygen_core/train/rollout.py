"""The trained policy in closed loop in the sim, in process: success and what it says.

The loop is the node's, minus the topics: every `execute` control steps the engine (the
real one, OxyGen mode by default) takes an observation rendered by the sim at the
camera's resolution, returns an action chunk, runs its language phase, and the first
`execute` rows of the chunk are the joint targets of the next `execute` control steps.
No expert is consulted. An episode ends at the task's success check or its time limit.

What is measured, per family: success rate; for the finished texts, whether a narration
names the target object's colour and shape, and whether a text ended at EOS (not at its
token budget); and the memory lines written (non-empty memory texts). This is the quick
check before `oxygen-sim-eval`, which drives the real node over ROS topics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from oxygen_core.engine.engine import Engine
from oxygen_core.observation import Observation
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.tasks import make_task
from oxygen_core.train.records import CAMERA_SLOTS


@dataclasses.dataclass(frozen=True)
class Text:
    stream: str
    text: str
    reason: str | None


@dataclasses.dataclass(frozen=True)
class Outcome:
    family: str
    seed: int
    instruction: str
    target: str  # "<colour> <shape>" of the instructed object
    success: bool
    steps: int
    texts: tuple[Text, ...]


def run_episode(
    engine: Engine,
    family: str,
    seed: int,
    execute: int,
    renderer: Renderer,
    control_hz: float = DEFAULT_CONTROL_HZ,
) -> Outcome:
    """One closed-loop episode of the policy behind `engine`."""
    task = make_task(family, seed)
    world = task.new_world()
    engine.reset()
    dt = 1.0 / control_hz
    texts: list[Text] = []
    chunk = np.empty((0, 0))
    steps = int(round(task.time_limit * control_hz))
    success = False
    for step in range(steps):
        if step % execute == 0:
            images = {slot: renderer.render(world, cam) for cam, slot in CAMERA_SLOTS.items()}
            obs = Observation(images, world.joints.astype(np.float32), task.instruction)
            chunk = engine.act(obs).actions
            for event in engine.language().events:
                if event.finished:
                    texts.append(Text(event.stream, event.text, event.finish_reason))
        world.step(chunk[step % execute], dt)
        if task.succeeded(world):
            success = True
            break
    target = task.objects[task.target].name
    return Outcome(family, seed, task.instruction, target, success, step + 1, tuple(texts))


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float]]:
    """Per family and overall: success rate, narration naming the target, EOS rate, counts."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.family, []).append(o)
    groups["all"] = list(outcomes)
    table = {}
    for name, group in groups.items():
        texts = [t for o in group for t in o.texts]
        narration = [(o.target, t) for o in group for t in o.texts if t.stream == "narration"]
        memory = [t.text for t in texts if t.stream == "memory" and t.text.strip()]
        table[name] = {
            "episodes": len(group),
            "success": _mean([o.success for o in group]),
            "narrations": len(narration),
            "narration_names_target": _mean([target in t.text for target, t in narration]),
            "texts": len(texts),
            "ended_at_eos": _mean([t.reason == "eos" for t in texts]),
            "memory_lines": len(memory),
        }
    return table


def _mean(values: list[bool]) -> float:
    return float(np.mean(values)) if values else float("nan")


def evaluate(
    engine: Engine,
    families: Sequence[str],
    seeds: Sequence[int],
    execute: int,
    camera_size: int,
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every family on every seed (seeds should be ones training never saw)."""
    renderer = Renderer(camera_size, camera_size)
    outcomes = []
    for seed in seeds:
        for family in families:
            outcome = run_episode(engine, family, seed, execute, renderer)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    return outcomes
