"""Grounding rows: grid cells of table positions, the rows an expert episode carries, and
their place in the training arrays after the streams' rows."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.config import EOS_ID, model_preset, robot_preset
from oxygen_core.engine.types import DEFAULT_STREAMS
from oxygen_core.model.tokenizer import Tokenizer
from oxygen_core.policy import Policy
from oxygen_core.sim.scene import WORKSPACE_X, WORKSPACE_Y
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import dataset as D
from oxygen_core.train import locate
from oxygen_core.train.records import expert_episode, scene_records

CFG = model_preset("tiny")


@pytest.mark.parametrize(
    ("xy", "expected"),
    [
        ((WORKSPACE_X[0] + 1e-6, WORKSPACE_Y[0] + 1e-6), "r1 c1"),  # near, robot's right
        ((WORKSPACE_X[1] - 1e-6, WORKSPACE_Y[1] - 1e-6), "r4 c6"),  # far, robot's left
        ((0.28 + 0.26 * 0.30, -0.24 + 0.48 * 0.55), "r2 c4"),
        ((0.0, 1.0), "r1 c6"),  # off the workspace: the edge cell
        ((1.0, -1.0), "r4 c1"),
    ],
)
def test_cells_bin_the_workspace(xy, expected):
    assert locate.cell(np.asarray(xy)) == expected


def test_rows_name_a_scene_object_and_the_target_with_its_bowl():
    task = make_task("put", 3)
    world = task.new_world()
    rng = np.random.default_rng(0)
    names = {o.name: locate.cell(o.position[:2]) for o in task.objects}
    asked = set()
    for _ in range(50):
        (find, where), (prompt, target) = locate.rows(task, world, rng)
        name = find.removeprefix("Find the ").removesuffix(":")
        assert where == names[name]
        asked.add(name)
        assert prompt == locate.TARGET_PROMPT
        bowl = names[task.objects[task.bowl].name]
        assert target == f"{names[task.objects[task.target].name]} to {bowl}"
    assert asked == set(names)  # every object gets asked about


def test_episode_rows_follow_the_carried_object():
    """'pick': the target's cell is where the object is at that step (it leaves the table
    in the gripper and is answered where it hangs)."""
    task = make_task("pick", 0)
    records = expert_episode("pick", 0, horizon=5, camera_size=32)
    first, last = records[0].grounding[1][1], records[-1].grounding[1][1]
    assert first == locate.cell(task.objects[task.target].position[:2])
    assert len(records[0].grounding) == locate.COUNT
    assert {r.grounding[1][1] for r in records} >= {first, last}


def test_grounding_rows_come_after_the_streams_and_score_only_the_answer():
    records = expert_episode("put", 3, horizon=CFG.action_horizon, camera_size=32)[::9]
    data = D.collect(records, CFG)
    robot = robot_preset("sim")
    norm = D.norm_stats(data, robot)
    tok = Tokenizer(D.train_tokenizer(D.corpus(data, robot, norm, DEFAULT_STREAMS)), "t")
    arrays = D.tokenize(data, Policy(CFG, robot, {}, tok, norm))
    streams = len(DEFAULT_STREAMS)
    assert arrays.text.shape[1] == streams + locate.COUNT
    for i in range(len(data)):
        for r in range(locate.COUNT):
            prompt, answer = data.grounding[i, r]
            row, scored = arrays.text[i, streams + r], arrays.text_target[i, streams + r]
            head = tok.encode(prompt)
            assert row[: len(head)].tolist() == head
            assert row[scored].tolist() == tok.encode(answer) + [EOS_ID]


def test_still_scenes_answer_from_their_own_world_and_repeat_per_seed():
    records = scene_records("push", 10_003, horizon=4, camera_size=32, poses=3)
    again = scene_records("push", 10_003, horizon=4, camera_size=32, poses=3)
    task = make_task("push", 10_003)
    cells = {o.name: locate.cell(o.position[:2]) for o in task.objects}
    assert len(records) == 3 and len({tuple(r.obs.state) for r in records}) == 3
    for r, s in zip(records, again, strict=True):
        assert r.grounding == s.grounding
        np.testing.assert_array_equal(r.obs.images["base_0_rgb"], s.obs.images["base_0_rgb"])
        (find, where), (_, target) = r.grounding
        assert where == cells[find.removeprefix("Find the ").removesuffix(":")]
        assert target == cells[task.objects[task.target].name]
        assert not r.actions.any() and r.actions.shape == (4, 7)
        assert r.obs.prompt == task.instruction
