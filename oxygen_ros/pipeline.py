"""What the node's configure step builds, without ROS: policy, engine, frame assembler,
chunk gate.

The node, offline replay and the live player all call `make_pipeline`, so they load
the same model the same way, compile the same shapes and gate chunks against the same
limits (`Settings.limits`, resolved from the parameters; no gate without them).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from oxygen_core import robot_io
from oxygen_core.config import ModelConfig
from oxygen_core.controller import shaping
from oxygen_core.engine import Engine, make_engine
from oxygen_core.engine.compile_cache import use_compile_cache
from oxygen_core.observation import Observation
from oxygen_core.policy import Policy, load_policy
from oxygen_core.safety.gate import ChunkGate
from oxygen_ros.inputs import FrameAssembler, InstructionCheck
from oxygen_ros.params import (
    ChunkLayout,
    ConfigError,
    Settings,
    check_delay,
    fit_to_model,
)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    settings: Settings
    layout: ChunkLayout
    assembler: FrameAssembler
    engine: Engine
    gate: ChunkGate | None  # what FrameLoop checks every chunk with; None: gate_policy off


def make_pipeline(settings: Settings) -> Pipeline:
    """Load the policy, build and warm up the engine (every shape compiled, through the
    persistent compilation cache), and the assembler. Raises whatever loading raises (the
    node turns it into FAILURE)."""
    cfg = settings.node
    use_compile_cache(cfg.compile_cache_dir)
    policy = load_policy(
        preset=cfg.preset,
        robot=settings.robot,
        checkpoint_dir=cfg.checkpoint_dir or None,
        tokenizer_path=cfg.tokenizer_path or None,
        seed=settings.engine.seed,
        asset_id=cfg.asset_id or None,
        dtype=cfg.dtype,
        norm_stats_missing=cfg.norm_stats_missing,
    )
    layout = fit_to_model(cfg, policy.config, policy.robot)
    check_delay(cfg, settings.engine, policy.config)
    assembler = _assembler(settings, policy, layout)
    engine = make_engine(policy, settings.engine)
    engine.warmup(blank_observation(policy, assembler, cfg.instruction))
    return Pipeline(settings, layout, assembler, engine, chunk_gate(settings))


def chunk_gate(settings: Settings) -> ChunkGate | None:
    """The gate over the resolved limits, on the control grid; None when none were."""
    cfg, limits = settings.node, settings.limits
    if limits is None:
        return None
    segments = shaping.segments(cfg.controller_model) if cfg.joint_trajectory else "linear"
    return ChunkGate(
        limits,
        cfg.gate_policy,
        cfg.control_period_s,
        cfg.gate_max_stretch,
        segments,
        cfg.gate_seam_easing,
    )


def restart_pipeline(pipeline: Pipeline) -> Pipeline:
    """What make_pipeline(pipeline.settings) returns, without loading or compiling again:
    the same engine restarted (Engine.restart) and a new assembler (no inputs, no skip
    counts). An evaluation worker replays many bags with one compiled engine this way."""
    pipeline.engine.restart()
    assembler = _assembler(pipeline.settings, pipeline.engine.policy, pipeline.layout)
    return dataclasses.replace(pipeline, assembler=assembler)


def _assembler(settings: Settings, policy: Policy, layout: ChunkLayout) -> FrameAssembler:
    """The node's frame assembler, its instruction parameter checked by the policy."""
    assembler = frame_assembler(settings, policy.config, layout, policy.instruction_problem)
    refused = assembler.on_instruction(settings.node.instruction)
    if refused:
        raise ConfigError(f"instruction parameter refused: {refused}")
    return assembler


def frame_assembler(
    settings: Settings,
    model: ModelConfig,
    layout: ChunkLayout,
    instruction_check: InstructionCheck | None = None,
) -> FrameAssembler:
    """The frame assembler with the robot's conventions for messages: its cameras'
    rotations, its state check, and the commanded joints read for the gate and the holds
    when trajectories go out (only they are gated). oxygen-doctor builds it too, without a
    policy (so without the instruction check), to refuse what configure would."""
    cfg, robot = settings.node, settings.robot
    return FrameAssembler(
        camera_topics=cfg.camera_topics,
        joint_names=cfg.joint_names,
        state_dim=robot.state_dim,
        image_size=model.vision.image_size,
        stale_timeout_s=cfg.stale_timeout_s,
        sync_slop_s=cfg.sync_slop_s,
        missing_camera=cfg.missing_camera,
        max_image_pixels=cfg.max_image_pixels,
        max_instruction_chars=cfg.max_instruction_chars,
        instruction_check=instruction_check,
        state_check=functools.partial(robot_io.gripper_problem, robot),
        commanded_names=layout.action_names if cfg.joint_trajectory else (),
        camera_rotations=robot.slot_rotations(len(cfg.camera_topics)),
    )


def blank_observation(policy: Policy, assembler: FrameAssembler, prompt: str) -> Observation:
    """Black images in the slots the cameras fill: warm-up compiles the shapes that run."""
    size = policy.config.vision.image_size
    images = {slot: np.zeros((size, size, 3), np.uint8) for slot in assembler.slots}
    state = robot_io.neutral_state(policy.robot)
    return Observation(images=images, state=state, prompt=prompt or "warm up")
