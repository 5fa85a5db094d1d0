"""One frame, two phases, three modes: the OxyGen engine and the paper's baselines.

Phase 1 (`act`, hard deadline) is the same in every mode: one VLM prefill of the
observation and S denoising steps that read its KV cache; the action chunk goes back to
the caller at once, before any language work. Phase 2 (`language`, soft deadline)
differs:

- `oxygen`: the frame's new requests are admitted into the KV pool seeded from the SAME
  prefix cache (cross-task sharing), then every live request, whatever frame it started
  in, decodes k tokens in one batch (cross-frame continuous batching). With
  `admit_in_step` the frame's first new request starts inside that batch's first step
  instead, its stream prompt riding on the step's weight reads.
- `shared` (ablation): new requests reuse the frame's prefix cache but each is decoded
  to completion inside the frame, one after another.
- `isolated` (the paper's baseline): each new request runs its own prefill of the
  observation, then decodes to completion, one after another.

All modes take the same triggers, assign the same request ids and rng keys, and so
produce the same greedy tokens; `oxygen-verify` checks exactly that.
"""

from __future__ import annotations

import abc
import time

import jax
import numpy as np

from oxygen_core.config import EOS_ID
from oxygen_core.engine import kv_pool
from oxygen_core.engine.generate import generate
from oxygen_core.engine.handover import check_handover_config, guidance_target, handover_overlap
from oxygen_core.engine.latency import LatencyModel, StepBudget
from oxygen_core.engine.scheduler import Admission, Request, Scheduler
from oxygen_core.engine.types import (
    ActionResult,
    EngineConfig,
    Handover,
    LanguageResult,
    TokenEvent,
)
from oxygen_core.model import pi05, rtc
from oxygen_core.model.plan import decode as decode_plan
from oxygen_core.observation import Observation
from oxygen_core.policy import Policy


class TextStreams:
    """Token ids and streamed text per live request (host side)."""

    def __init__(self, policy: Policy) -> None:
        self.tokenizer = policy.tokenizer
        self.tokens: dict[int, list[int]] = {}
        self.sent: dict[int, str] = {}

    def event(self, req: Request, new: list[int], finished: bool, reason: str | None) -> TokenEvent:
        ids = self.tokens.setdefault(req.id, [])
        ids.extend(new)
        text = self._text(ids)
        shown = text if finished else text.rstrip("\ufffd")
        delta = shown[len(self.sent.get(req.id, "")) :]
        self.sent[req.id] = shown
        if finished:
            self.tokens.pop(req.id)
            self.sent.pop(req.id)
        return TokenEvent(
            req.id, req.stream, req.origin_frame, tuple(new), delta, shown, finished, reason
        )

    def _text(self, ids: list[int]) -> str:
        # A random-weight model may sample ids beyond a smaller test tokenizer's vocabulary.
        return self.tokenizer.decode([i for i in ids if i < self.tokenizer.vocab_size])

    def clear(self) -> None:
        self.tokens.clear()
        self.sent.clear()


def finish_reason(tokens: list[int], stop_at_eos: bool) -> str:
    return "eos" if stop_at_eos and tokens and tokens[-1] == EOS_ID else "max_tokens"


class Engine(abc.ABC):
    """Phase 1 and the request bookkeeping shared by every mode."""

    mode = "base"

    def __init__(self, policy: Policy, cfg: EngineConfig) -> None:
        self.policy, self.cfg = policy, cfg
        self.model = policy.config
        self.frame = -1
        # A bucket larger than the pool cannot be sliced from it: clip it to the pool.
        buckets = tuple(sorted({min(b, cfg.max_active_requests) for b in cfg.batch_buckets}))
        self.scheduler = Scheduler(
            cfg.streams,
            cfg.max_active_requests,
            buckets,
            cfg.pool_full_policy,
            cfg.max_queued_requests,
        )
        self.text = TextStreams(policy)
        self.prompts = {s.name: policy.tokenizer.encode(s.prompt) for s in cfg.streams}
        for stream in cfg.streams:
            if not self.prompts[stream.name] or stream.max_tokens < 1:
                raise ValueError(f"stream {stream.name!r} needs a prompt and max_tokens >= 1")
        self.prompt_len = max((len(p) for p in self.prompts.values()), default=0)
        self.max_new = max((s.max_tokens for s in cfg.streams), default=0)  # none: actions only
        self.capacity = self.model.prefix_len + self.prompt_len + self.max_new
        self._cache: pi05.PrefixCache | None = None
        self._inputs: pi05.PrefixInputs | None = None
        self._act_s = 0.0
        check_handover_config(cfg)
        # d for rtc_delay_steps="auto": read by act, written only by the caller's
        # `ChunkTimeline.commit` with each published chunk's tick-to-publish latency (what
        # the robot waits), so warm-up and compilation never enter it.
        self.delay = rtc.DelayEstimator()

    # ------------------------------------------------------------------ phase 1
    def act(
        self,
        obs: Observation,
        handover: Handover | None = None,
        plan_answer: str | None = None,
        noise: np.ndarray | None = None,
    ) -> ActionResult:
        """Prefill once, answer the robot's plan prompt if it has one (`model/plan.py`),
        denoise S steps; raises ObservationError on unusable input.

        handover: the chunk the robot is executing; cfg.chunk_handover says what to do with
        it ("replace", the default, ignores it; "rtc" guides the denoising toward it:
        `handover.py`, `model/rtc.py`). Raises ValueError on a malformed one.
        plan_answer: the plan to act on instead of the VLM's answer (evaluation with the
        true answer: `Policy.action_cache`); ValueError for a robot without a plan stage.
        noise: the denoiser's start [H, A] or [1, H, A] instead of the frame's seeded draw
        (as openpi's `Policy.infer(obs, noise=...)`): an outside check feeds both the same;
        used as given (cfg.start_noise_scale scales the seeded draw only).
        """
        inputs = self.policy.prefix_inputs(obs)
        # Drawn for the frame about to start, and checked before it counts as started.
        start = self.policy.noise(
            (self.cfg.seed, self.frame + 1), given=noise, scale=self.cfg.start_noise_scale
        )
        delay, meet = handover_overlap(self.cfg, self.delay, self.policy, handover)
        mode = self.cfg.chunk_handover if meet is not None else "replace"
        self.frame += 1
        t0 = time.perf_counter()
        cache = jax.block_until_ready(pi05.prefill(self.policy.params, self.model, inputs))
        t1 = time.perf_counter()
        act_cache, plan_ids = jax.block_until_ready(
            self.policy.action_cache(cache, None if plan_answer is None else [plan_answer])
        )
        plan_s = 0.0 if plan_ids is None else time.perf_counter() - t1
        raw = self._denoise(act_cache, start, mode, meet, obs.state)
        t2 = time.perf_counter()
        self._cache, self._inputs, self._act_s = cache, inputs, t2 - t0
        self.scheduler.trigger(self.frame, obs.prompt)
        actions = self.policy.robot_actions(raw[0], obs.state)
        if mode == "blend":
            actions = rtc.blend(actions, meet)
        plan_text = None if plan_ids is None else self.policy.tokenizer.decode(plan_ids[0])
        return ActionResult(
            self.frame, actions, t1 - t0, t2 - t1 - plan_s, mode, delay, plan_s, plan_text
        )

    def _denoise(
        self,
        cache: pi05.PrefixCache,
        noise: np.ndarray,
        mode: str,
        meet: rtc.Overlap | None,
        state: np.ndarray,
    ) -> np.ndarray:
        """The frame's model-space chunk [1, H, A] from `noise`; "rtc" guides it toward
        the rows the robot runs meanwhile (`meet`)."""
        params, steps = self.policy.params, self.cfg.denoise_steps
        if mode != "rtc":
            return np.asarray(pi05.denoise(params, self.model, cache, noise, steps))
        target, weights = guidance_target(self.policy, meet, state)
        guidance = np.float32(self.cfg.rtc_max_guidance)
        return np.asarray(
            rtc.guided_denoise(params, self.model, cache, noise, target, weights, guidance, steps)
        )

    def request(self, stream: str, max_tokens: int | None = None) -> str | None:
        """Start a request of `stream` with the next language phase (on demand; any
        thread). Returns why it was refused (the scheduler's queue already holds what a
        frame can take), or None; raises ValueError on an unknown stream or budget."""
        if max_tokens is not None and not 1 <= max_tokens <= self.max_new:
            raise ValueError(
                f"max_tokens {max_tokens} outside [1, {self.max_new}] (largest stream budget)"
            )
        return self.scheduler.demand(stream, max_tokens)

    def reset(self) -> None:
        """Drop every request and the last prefix (deactivate/cleanup): the next
        language phase needs a new frame."""
        self.scheduler.clear()
        self.text.clear()
        self._cache = self._inputs = None

    def restart(self) -> None:
        """Back to the state warm-up leaves: no requests, frame -1, request ids from 0,
        so the next run acts and samples exactly as a new engine with the same config
        would, without compiling again. (`reset` keeps frame and request ids counting,
        as a node reactivated mid-session needs.) The latency model keeps what it has
        learnt: only k="auto" reads it, and that choice depends on measured times anyway.
        """
        self.reset()
        self.frame = -1
        self.scheduler.restart()

    def warmup(self, obs: Observation) -> None:
        """Compile every shape with one real observation, then forget it."""
        result = self.act(obs)
        if self.cfg.chunk_handover == "rtc":  # the guided denoise is a shape of its own
            self.act(obs, Handover(result.actions, executed=0, control_period_s=1.0))
        self._warm_language()
        self.restart()

    def compile_count(self) -> int:
        """Compiled executables across the engine's jitted functions (flat after warm-up)."""
        fns = (
            pi05.prefill,
            decode_plan,
            pi05.denoise,
            rtc.guided_denoise,
            kv_pool.admit_row,
            kv_pool.decode,
            kv_pool.release,
            generate,
        )
        return sum(f._cache_size() for f in fns)

    # ------------------------------------------------------------------ phase 2
    @abc.abstractmethod
    def language(self, time_left_s: float | None = None) -> LanguageResult:
        """Phase 2: admit this frame's requests and decode; token events out."""

    @abc.abstractmethod
    def _warm_language(self) -> None:
        """Compile (and time) every language shape this mode runs."""

    def _require_frame(self) -> None:
        """Language requests start from a frame's prefix: there must have been one."""
        if self._cache is None:
            raise RuntimeError("language() needs a frame's prefix cache: call act() first")

    def _stops(self, req: Request) -> bool:
        return self.scheduler.streams[req.stream].stop_at_eos

    def _row_request(self, req: Request) -> kv_pool.RowRequest:
        stream = self.scheduler.streams[req.stream]
        prompt = self.prompts[req.stream]
        padded = np.zeros(self.prompt_len, np.int32)
        padded[: len(prompt)] = prompt
        # Raw threefry key data (seed, request id): distinct per request, free to build.
        key = np.array([self.cfg.seed, req.id], np.uint32)
        return kv_pool.RowRequest(
            prompt=padded,
            n_prompt=np.int32(len(prompt)),
            max_tokens=np.int32(req.max_tokens),
            stop_eos=np.bool_(stream.stop_at_eos),
            temperature=np.float32(stream.temperature),
            key=key,
        )

    def _result(
        self, admission: Admission, k: int, events: list[TokenEvent], seconds: float, batch: int
    ) -> LanguageResult:
        return LanguageResult(
            frame=self.frame,
            events=tuple(events),
            decode_s=seconds,
            k=k,
            batch=batch,
            bucket=admission.bucket,
            admitted=len(admission.admitted),
            rejected=admission.rejected,
            queued=len(self.scheduler.queue),
            pool_used=len(self.scheduler.active),
            pool_capacity=self.scheduler.capacity,
        )


class OxygenEngine(Engine):
    """Shared prefix + cross-frame continuous batching over the preallocated KV pool."""

    mode = "oxygen"

    def __init__(self, policy: Policy, cfg: EngineConfig) -> None:
        super().__init__(policy, cfg)
        self.k_max = cfg.max_decode_tokens if cfg.steps_per_frame == "auto" else cfg.steps_per_frame
        if max(cfg.batch_buckets) > cfg.max_active_requests:
            raise ValueError(  # a decode over more rows than the pool has cannot run
                f"batch bucket {max(cfg.batch_buckets)} is larger than the KV pool "
                f"({cfg.max_active_requests} rows): the largest bucket must equal "
                "max_active_requests"
            )
        if not 1 <= cfg.min_decode_tokens <= self.k_max:
            raise ValueError(
                f"need 1 <= min_decode_tokens ({cfg.min_decode_tokens}) <= k_max ({self.k_max})"
            )
        self.latency = LatencyModel()
        self.step_budget = StepBudget(
            cfg.steps_per_frame, cfg.min_decode_tokens, cfg.budget_margin_s
        )
        dtype = pi05.param_dtype(policy.params)
        self.pool = kv_pool.init_pool(self.model, cfg.max_active_requests, self.capacity, dtype)

    def language(self, time_left_s: float | None = None) -> LanguageResult:
        self._require_frame()
        if self.cfg.steps_per_frame == "auto" and not self.latency.step_s:
            raise ValueError("k='auto' has no decode timings yet: warm it up first")
        t0 = time.perf_counter()
        admission = self.scheduler.admit(self.frame)
        k = self._choose_k(admission, time_left_s)
        events = [self.text.event(r, [], True, "evicted") for r in admission.evicted]
        # With no step to ride on (k = 0) the rider is admitted apart, as are the rest.
        rider = self._rider(admission) if k else None
        riding = [rider] if rider else []
        for req in admission.admitted[len(riding) :]:
            self.pool = kv_pool.admit(
                self.policy.params,
                self.model,
                self.pool,
                req.slot,
                self._cache,
                self._row_request(req),
            )
        batch = len(self.scheduler.active)
        if admission.bucket:
            start = self._row_start(rider, admission.bucket) if rider else None
            self.pool, packed = kv_pool.decode(
                self.policy.params,
                self.model,
                self.pool,
                np.int32(k),
                admission.bucket,
                self.k_max,
                start,
            )
            events += self._events(kv_pool.DecodeOutput.unpack(packed))
        seconds = time.perf_counter() - t0
        if admission.bucket and k:
            # A riding request's prompt is part of the first step: it counts in the step.
            apart = len(admission.admitted) - len(riding)
            fixed_s = self.latency.fixed_s(admission.bucket, apart)
            self.latency.observe_step(admission.bucket, (seconds - fixed_s) / k)
        return self._result(admission, k, events, seconds, batch)

    def _rider(self, admission: Admission) -> Request | None:
        """The new request that starts inside the decode call's first step when the frame
        decodes one (admit_in_step: the frame's first new request)."""
        return admission.admitted[0] if self.cfg.admit_in_step and admission.admitted else None

    def _row_start(self, req: Request, bucket: int) -> kv_pool.RowStart:
        """`req` starting in a decode call over `bucket` rows (checked: XLA would clamp a
        slot outside the bucket silently)."""
        if not 0 <= req.slot < bucket:
            raise ValueError(f"slot {req.slot} is outside the decode bucket of {bucket} rows")
        return kv_pool.RowStart(np.int32(req.slot), self._row_request(req), self._cache)

    def reset(self) -> None:
        super().reset()
        self.pool = kv_pool.release(
            self.model, self.pool, np.arange(self.cfg.max_active_requests, dtype=np.int32)
        )

    def _choose_k(self, admission: Admission, time_left_s: float | None) -> int:
        """Tokens per live row this frame (StepBudget); never more than a row still needs."""
        if admission.bucket == 0:
            return 0
        if time_left_s is None:
            budget = self.cfg.frame_budget_s
            time_left_s = float("inf") if budget is None else budget - self._act_s
        k_cap = min(self.k_max, self._tokens_needed(admission))
        return self.step_budget.choose(admission, self.latency, k_cap, time_left_s)

    def _tokens_needed(self, admission: Admission) -> int:
        """The most tokens any live row can still produce (no decode step past that)."""
        # A request admitted this frame has no token list yet. Admitted apart, it has its
        # first token from the admission; the rider (which then always has a step to ride
        # on: k >= 1 whenever a row needs one) gets every token from the steps.
        rider = self._rider(admission)
        rider_id = None if rider is None else rider.id

        def needed(r: Request) -> int:
            got = self.text.tokens.get(r.id)
            return r.max_tokens - (len(got) if got is not None else int(r.id != rider_id))

        return max(needed(r) for r in self.scheduler.active.values())

    def _events(self, out: kv_pool.DecodeOutput) -> list[TokenEvent]:
        """Token events from the frame's one decode output; frees finished rows."""
        events = []
        for slot, req in sorted(self.scheduler.slots.items()):
            new = out.emitted(slot)
            finished = bool(out.done[slot])
            reason = None
            if finished:
                self.scheduler.finish(req.id)
                reason = finish_reason(self.text.tokens.get(req.id, []) + new, self._stops(req))
            events.append(self.text.event(req, new, finished, reason))
        return events

    def _warm_language(self) -> None:
        """Compile admit and every decode bucket; time them for the latency model (decode
        over a busy pool: steps over finished rows are skipped; reset frees it after)."""
        req = Request(0, self.cfg.streams[0].name, 0, 0, 1)
        for _ in range(2):  # first call compiles, second is timed
            t0 = time.perf_counter()
            self.pool = jax.block_until_ready(
                kv_pool.admit(
                    self.policy.params,
                    self.model,
                    self.pool,
                    0,
                    self._cache,
                    self._row_request(req),
                )
            )
            self.latency.admit_s = time.perf_counter() - t0
        self.pool = kv_pool.busy(self.pool)
        steps = min(2, self.k_max)
        for bucket in self.scheduler.buckets:
            for _ in range(2):
                call_s = self._time_decode(bucket, 0)
                step_s = (self._time_decode(bucket, steps) - call_s) / steps
            self.latency.calibrate(bucket, step_s, call_s)
            if self.cfg.admit_in_step:  # compile the call a new request rides in (slot 0)
                self._time_decode(bucket, 1, self._row_start(req, bucket))
                self.pool = kv_pool.busy(self.pool)

    def _time_decode(self, bucket: int, k: int, start: kv_pool.RowStart | None = None) -> float:
        t0 = time.perf_counter()
        self.pool, packed = kv_pool.decode(
            self.policy.params, self.model, self.pool, np.int32(k), bucket, self.k_max, start
        )
        np.asarray(packed)
        return time.perf_counter() - t0


class SequentialEngine(Engine):
    """The baselines: every new request decoded to completion within its frame."""

    def __init__(self, policy: Policy, cfg: EngineConfig, own_prefill: bool) -> None:
        super().__init__(policy, cfg)
        self.own_prefill = own_prefill
        self.mode = "isolated" if own_prefill else "shared"

    def language(self, time_left_s: float | None = None) -> LanguageResult:
        del time_left_s  # the baselines have no step budget: they finish every request
        self._require_frame()
        t0 = time.perf_counter()
        admission = self.scheduler.admit(self.frame)
        events = []
        for req in admission.admitted:
            tokens = [int(t) for t in np.asarray(self._generate(req)) if t >= 0]
            self.scheduler.finish(req.id)
            events.append(
                self.text.event(req, tokens, True, finish_reason(tokens, self._stops(req)))
            )
        return self._result(admission, 0, events, time.perf_counter() - t0, min(1, len(events)))

    def _generate(self, req: Request) -> jax.Array:
        cache = self._cache
        if self.own_prefill:  # the isolated language task encodes the observation itself
            cache = pi05.prefill(self.policy.params, self.model, self._inputs)
        return generate(
            self.policy.params,
            self.model,
            cache,
            self._row_request(req),
            self.capacity,
            self.max_new,
        )

    def _warm_language(self) -> None:
        req = Request(0, self.cfg.streams[0].name, 0, 0, 1)
        np.asarray(self._generate(req))


def make_engine(policy: Policy, cfg: EngineConfig) -> Engine:
    """The engine for cfg.engine_mode ("oxygen", "shared" or "isolated")."""
    if cfg.engine_mode == "oxygen":
        return OxygenEngine(policy, cfg)
    if cfg.engine_mode in ("shared", "isolated"):
        return SequentialEngine(policy, cfg, own_prefill=cfg.engine_mode == "isolated")
    raise ValueError(f"unknown engine mode {cfg.engine_mode!r}; choose oxygen, shared or isolated")
