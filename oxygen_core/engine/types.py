"""Plain data that crosses the engine boundary: configs in, results out.

Every engine mode (oxygen, shared, isolated) takes the same `EngineConfig` and returns
the same result types, so the node, the replay tool and the benchmark drive them alike.
Results hold numpy arrays and Python scalars only: one device-to-host copy per phase.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

import numpy as np

Trigger = Literal["every", "instruction_change", "on_demand"]
PoolFullPolicy = Literal["queue", "skip", "evict_oldest"]
FinishReason = Literal["eos", "max_tokens", "evicted"]
Mode = Literal["oxygen", "shared", "isolated"]
ChunkHandover = Literal["replace", "blend", "rtc"]


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """A language stream: its own prompt appended causally after the shared prefix."""

    name: str
    prompt: str
    max_tokens: int = 30
    temperature: float = 0.0  # 0 means greedy
    stop_at_eos: bool = True
    trigger: Trigger = "every"
    every_frames: int = 1


DEFAULT_STREAMS = (
    StreamConfig("narration", "Narrate:", max_tokens=30, trigger="every", every_frames=1),
    StreamConfig("memory", "Remember:", max_tokens=30, trigger="instruction_change"),
)


def parameter(
    default: Any,
    doc: str,
    span: tuple[float, float] | None = None,
    choices: tuple[str, ...] = (),
    **flags: bool,
) -> Any:
    """A dataclass field that is also a node parameter of the same name.

    The metadata (description, numeric range, choices; flags dynamic, read_only) is plain
    data: oxygen_ros.params turns it into ROS parameter descriptors and checks values
    against it, so this package stays free of ROS.
    """
    meta = {"doc": doc, "span": span, "choices": choices, **flags}
    return dataclasses.field(default=default, metadata=meta)


def is_parameter(field: dataclasses.Field) -> bool:
    """Whether a config field is a node parameter (declared with `parameter`)."""
    return "doc" in field.metadata


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """How the engine schedules work. Fields declared with `parameter` are the node's ROS
    parameters of the same name (one vocabulary from the params YAML down to the engine);
    frame_budget_s and streams are filled from other parameters (docs/DESIGN.md section 6).

    steps_per_frame (k): language tokens decoded per frame for every active request, or
        "auto": min_decode_tokens while the pool keeps up, and while requests wait for a
        row the largest k in [min_decode_tokens, max_decode_tokens] whose predicted
        language time fits the frame's time left (time_left_s, else frame_budget_s minus
        phase 1), less budget_margin_s (docs/DESIGN.md section 7).
    max_active_requests: rows of the preallocated KV pool (active language requests).
    batch_buckets: decode batch sizes compiled at warm-up; a batch runs in the
        smallest bucket that holds every occupied row.
    admit_in_step: on, the frame's first new request rides in the decode batch's first
        step (`kv_pool.decode`) and gets k tokens in its first frame; off, it is admitted
        by a pass of the VLM over its stream prompt, which reads every weight as a decode
        step does, then decodes k tokens with the batch (1 + k). Other new requests of the
        frame are always admitted apart (docs/DESIGN.md section 4).
    budget_margin_s: 0.01 by default because on the robot the frame still publishes
        after decoding, and a frame still running at the next tick turns that tick into an
        overrun (no chunk); 10 ms covers publishing and scheduling jitter on the CPUs
        measured. Offline measurements of the engine alone (bench, verify) pass 0.
    chunk_handover: what `act` does with a `Handover` (the chunk the robot is executing):
        "replace" ignores it; "blend" cross-fades the new chunk into it over their
        overlap; "rtc" guides the denoising toward it (real-time chunking,
        `oxygen_core.model.rtc`).
    rtc_max_guidance: the guidance weight's clip (the paper's beta).
    rtc_delay_steps: d, control steps that run before a new chunk arrives (frozen to the
        previous chunk), or "auto": the largest recent latency in `Engine.delay` rounded
        up to control steps (the tick-to-publish latencies of published chunks, which
        `ChunkTimeline.commit` records).
    """

    engine_mode: Mode = parameter(
        "oxygen",
        "oxygen: shared KV + cross-frame batching; shared / isolated: the paper's baselines.",
        choices=typing.get_args(Mode),
    )
    steps_per_frame: int | Literal["auto"] = parameter(
        1,
        "Language tokens decoded per frame for every request (k), or 'auto' to fit the budget.",
        dynamic=True,
    )
    max_decode_tokens: int = parameter(16, "Largest k that 'auto' may choose.", (1, 1024))
    min_decode_tokens: int = parameter(
        1, "k that 'auto' keeps while the pool keeps up, even with no time left.", (1, 1024)
    )
    denoise_steps: int = parameter(10, "Flow-matching Euler steps (S).", (1, 100))
    start_noise_scale: float = parameter(
        1.0,
        "Scale of the denoiser's seeded start noise: 1 samples the policy as trained "
        "(openpi); nearer 0 nearer its mean path, whose rows are smoother where a small "
        "policy leaves noise in its chunks.",
        (0.0, 1.0),
    )
    max_active_requests: int = parameter(
        32, "Rows of the preallocated KV pool (active requests).", (1, 1024)
    )
    batch_buckets: tuple[int, ...] = parameter(
        (1, 2, 4, 8, 16, 32), "Decode batch sizes compiled at configure time."
    )
    budget_margin_s: float = parameter(
        0.01, "Time 'auto' k leaves free before the next tick (publishing, jitter).", (0.0, 10.0)
    )
    admit_in_step: bool = parameter(
        True,
        "Start a frame's first new request inside its first decode step: its stream prompt "
        "shares the step's weight reads instead of a pass of its own, and it gets k tokens in "
        "that frame instead of 1 + k.",
    )
    pool_full_policy: PoolFullPolicy = parameter(
        "queue",
        "What a new request does when the KV pool is full.",
        choices=typing.get_args(PoolFullPolicy),
    )
    max_queued_requests: int = parameter(
        64, "Requests waiting for a pool row (pool_full_policy queue).", (0, 4096)
    )
    seed: int = parameter(0, "Seed of random weights and of language sampling.", (0, 2**31 - 1))
    chunk_handover: ChunkHandover = parameter(
        "replace",
        "How a new chunk meets the one the robot executes: replace (ignore it), blend "
        "(cross-fade the overlap), rtc (real-time chunking: guided denoising).",
        choices=typing.get_args(ChunkHandover),
    )
    rtc_max_guidance: float = parameter(
        5.0, "rtc: clip of the guidance weight (the paper's beta).", (0.001, 1000.0)
    )
    rtc_delay_steps: int | Literal["auto"] = parameter(
        "auto",
        "rtc/blend: control steps that run before a new chunk arrives (d, an integer >= 0), "
        "or 'auto': recent tick-to-publish latencies rounded up to control steps.",
        dynamic=True,
    )
    frame_budget_s: float | None = None  # the node's frame period
    streams: tuple[StreamConfig, ...] = DEFAULT_STREAMS  # parameters streams.<name>.*


@dataclasses.dataclass(frozen=True)
class Handover:
    """The chunk the robot is executing when a frame's observation is taken.

    previous: float32 [rows <= horizon, robot action_dim], robot units, as it was sent.
    executed: its rows already run at the observation's time (0: it just started).
    control_period_s: time between its rows (converts an "auto" delay into steps).
    """

    previous: np.ndarray
    executed: int
    control_period_s: float


@dataclasses.dataclass(frozen=True)
class ActionResult:
    """Phase 1 of a frame: the action chunk, ready to publish before any language work.

    actions: float32 [horizon, robot action_dim], unnormalised robot units.
    handover: how the chunk met the previous one: "replace" when no handover was given
        or it had no rows left to meet; else the configured chunk_handover.
    delay_steps: d, the control steps expected to run before this chunk arrives (0
        without a handover); its first d rows are the previous chunk's, to guidance.
    plan_s, plan: the plan stage of a two-stage robot (`model/plan.py`) between prefill
        and denoising: its time and its answer ("r2 c5"); 0 and None without one.
    """

    frame: int
    actions: np.ndarray
    prefill_s: float
    denoise_s: float
    handover: ChunkHandover = "replace"
    delay_steps: int = 0
    plan_s: float = 0.0
    plan: str | None = None


@dataclasses.dataclass(frozen=True)
class TokenEvent:
    """New tokens of one language request in one frame."""

    request_id: int
    stream: str
    origin_frame: int
    token_ids: tuple[int, ...]
    text_delta: str
    text: str
    finished: bool
    finish_reason: FinishReason | None


@dataclasses.dataclass(frozen=True)
class LanguageResult:
    """Phase 2 of a frame: admissions, one batched decode of k tokens, evictions."""

    frame: int
    events: tuple[TokenEvent, ...]
    decode_s: float
    k: int
    batch: int  # active rows decoded this frame
    bucket: int  # compiled batch size that ran (0 when nothing ran)
    admitted: int
    rejected: int  # requests dropped by admission control this frame
    queued: int
    pool_used: int
    pool_capacity: int
