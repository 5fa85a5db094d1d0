"""The Meta-World robot's control loop, one env step per tick, without an rclpy node.

Each `tick` at sim time t (one control period of the env, 12.5 ms, apart):

1. the episode over at the last tick is closed (its outcome published) and the next one
   starts: the task's env reset to the episode's seed, the instruction published;
2. what the robot's drivers publish, stamped t: the state JointState (STATE_NAMES, what
   the policy reads), the Sawyer's joints, the corner2 camera (every `camera_every`
   ticks from the episode's first, so no frame of the last scene follows a reset), the
   instruction again each sim second, the narration on change and each memory line; then
   /clock = t. Sensors go before the clock, so a node whose frame timer fires at t
   already has them;
3. action chunks: with an external policy, every ActionChunk received since the last tick
   is checked (`chunk_rejection`) and, when sound, runs from its stamp (a zero stamp: now),
   superseding the chunk before it from there; a rejected one is counted by its reason and
   never reaches the env. With the expert, the scripted action for this tick, clipped to
   [-1, 1] as the env clips it, is wrapped as a one-row chunk stamped t, published on
   /metaworld/expert/action_chunk and taken the same way; with `noise` (DART, for training
   data: oxygen-record --world metaworld) the chunk taken is that action plus the episode's noise
   bursts, clipped again, while the published one stays clean (the training target). With
   a baseline (`hold`, `random`, `blind`: the image-free figures a policy is read
   against, oxygen_core.metaworld.baselines), each tick's chunk is one row of its action
   for this observation, taken the same way too.
   In lockstep (`LoopConfig.lockstep_ticks`, a latency sweep) the tick first waits
   until the policy node has finished its latest frame due, so that the node's compute
   takes no sim time and a chunk's delay is the d the node is set to (`lockstep_due`;
   the first tick waits for the node's first frame, up to lockstep_timeout_s);
4. the benchmark's success flag or its step limit ends the episode (checked after the policy
   saw the world, as a Meta-World rollout checks after the step that succeeds); otherwise
   the running chunk's row for t (row k at stamp + k periods: rows already past are
   skipped) is stepped, or, when no chunk runs, the hold action (zero delta, last gripper).

Publishing goes through a `Port` by the keys of TOPICS, with the tick's sim time.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import functools
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from builtin_interfaces.msg import Duration
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header, String

from oxygen_core.clock import NS_PER_S
from oxygen_core.metaworld.baselines import BASELINES, Actor, baseline_actor
from oxygen_core.metaworld.env import (
    ACTION_NAMES,
    SAWYER_JOINTS,
    STATE_NAMES,
    Expert,
    MetaWorldEnv,
    Observation,
)
from oxygen_core.metaworld.tasks import MT10_TASKS, Narrator, instruction
from oxygen_core.train.records import Dart, DartNoise
from oxygen_ros import convert
from oxygen_ros.convert import ns_to_stamp, stamp_to_ns
from oxygen_ros.msg import ActionChunk, EngineStats
from oxygen_ros.tools.sim_host import INSTRUCTION, SimTopic

SIM_DRIVEN = ("expert", *BASELINES)  # policies the sim runs itself (no node)
POLICIES = ("external", *SIM_DRIVEN)
CONTROL_PERIOD_NS = 12_500_000  # the env's step: MuJoCo's 2.5 ms x frame skip 5 (80 Hz)
_PERIOD_TOLERANCE_NS = 1_000  # a chunk's control_period may differ by rounding only
_INBOX_MAX = 16  # chunks waiting for the next tick; a policy sends about one a frame
_GRID_PROBE_S = 0.5  # lockstep: how long a tick waits for a frame while the grid is unknown


# The outcome goes out as std_msgs/String JSON: oxygen_ros/EpisodeOutcome (msg/, which this
# tool may not change) holds the tabletop's fields (family, contacts, seams), not these.
TOPICS: tuple[SimTopic, ...] = (
    SimTopic("clock", "/clock", Clock, "sim time, one env step per tick"),
    SimTopic(
        "camera",
        "/metaworld/corner2/image_raw",
        Image,
        "corner2 camera, rgb8, upright",
        parameter="camera_topic",
    ),
    SimTopic(
        "state",
        "/metaworld/state",
        JointState,
        f"the policy's state {list(STATE_NAMES)} (m; opening 0..1)",
        parameter="state_topic",
    ),
    SimTopic(
        "joints",
        "/metaworld/joint_states",
        JointState,
        "the Sawyer's arm joints (rad) and fingers (m)",
        parameter="joint_state_topic",
    ),
    INSTRUCTION,
    SimTopic("episode", "/metaworld/episode", String, "one JSON outcome per finished episode"),
    SimTopic("narration", "/metaworld/narration", String, "the episode's phase, on change"),
    SimTopic("memory", "/metaworld/memory", String, "a line per phase reached"),
    SimTopic(
        "expert_chunk",
        "/metaworld/expert/action_chunk",
        ActionChunk,
        "the scripted expert's one-row chunks",
    ),
)
ACTION_TOPIC = "/oxygen/action_chunk"  # the default input: the oxygen node's ~/action_chunk
STATS_TOPIC = "/oxygen/stats"  # lockstep's: the oxygen node's ~/stats, one per frame done


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """One run of the Meta-World robot."""

    episodes: tuple[tuple[str, int], ...]  # (task, seed) in run order
    policy: str = "external"
    camera_rate_hz: float = 20.0
    camera_size: int = 224
    start_s: float = 1.0  # sim time of the first tick (a zero stamp would mean "now")
    noise: Dart | None = None  # bursts on what the expert's env runs (one stream per episode)
    # > 0: lockstep with an external policy that takes a frame every this many ticks
    # (`lockstep_due`); a frame not done within lockstep_timeout_s of wall time is counted
    # and let go.
    lockstep_ticks: int = 0
    lockstep_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r} is not one of {POLICIES}")
        if self.lockstep_ticks < 0 or self.lockstep_timeout_s <= 0:
            raise ValueError("lockstep_ticks must be >= 0 and lockstep_timeout_s > 0")
        if self.lockstep_ticks and self.policy != "external":
            raise ValueError(f"lockstep waits for an external policy, not {self.policy!r}")
        if self.noise is not None and self.policy != "expert":
            raise ValueError(f"noise perturbs the expert's actions, not policy {self.policy!r}")
        if not self.episodes:
            raise ValueError("no episodes to run")
        for task, _ in self.episodes:
            if task not in MT10_TASKS:
                raise ValueError(f"unknown task {task!r}; choose from {MT10_TASKS}")
        if not 0 < self.camera_rate_hz <= NS_PER_S / CONTROL_PERIOD_NS:
            raise ValueError(f"camera_rate_hz must be in (0, 80], got {self.camera_rate_hz}")
        if not 16 <= self.camera_size <= 1024:
            raise ValueError(f"camera_size must be in [16, 1024], got {self.camera_size}")

    @property
    def camera_every(self) -> int:
        """Ticks between camera frames (the rate rounded so that frames fall on ticks)."""
        return max(1, round(NS_PER_S / CONTROL_PERIOD_NS / self.camera_rate_hz))


def episode_order(tasks: tuple[str, ...], seed: int, episodes: int) -> tuple[tuple[str, int], ...]:
    """`episodes` seeds from `seed` per task, tasks interleaved seed by seed."""
    return tuple((t, s) for s in range(seed, seed + episodes) for t in tasks)


class Port(Protocol):
    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        """Send `msg` on the topic of `key` (a row of TOPICS) at sim time `time_ns`."""
        ...


def chunk_rejection(msg: ActionChunk) -> str | None:
    """Why the chunk must not reach the env (None: it may): its shape, names, values or
    control period."""
    horizon, width = msg.horizon, msg.action_dim
    if width != len(ACTION_NAMES) or horizon < 1 or len(msg.actions) != horizon * width:
        return "shape"
    if tuple(msg.joint_names) != ACTION_NAMES:
        return "action_names"
    if not np.isfinite(np.asarray(msg.actions, dtype=np.float64)).all():
        return "non_finite"
    if abs(stamp_to_ns(msg.control_period) - CONTROL_PERIOD_NS) > _PERIOD_TOLERANCE_NS:
        return "control_period"
    return None


@dataclasses.dataclass(frozen=True)
class Chunk:
    """An accepted chunk: row k applies from start_ns + k control periods."""

    start_ns: int
    rows: np.ndarray  # H x 4


class ChunkRunner:
    """The chunks a robot's controller runs: the latest-received chunk whose stamp has come
    supersedes the ones before it; none running (none yet, or its rows used up) is a hold."""

    def __init__(self) -> None:
        self._chunks: list[Chunk] = []

    def add(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)

    def clear(self) -> None:
        self._chunks.clear()

    def row_at(self, t_ns: int) -> np.ndarray | None:
        """The action for sim time t (None: hold)."""
        started = [i for i, c in enumerate(self._chunks) if c.start_ns <= t_ns]
        if not started:
            return None
        del self._chunks[: started[-1]]  # superseded from their successor's stamp on
        chunk = self._chunks[0]
        k = (t_ns - chunk.start_ns) // CONTROL_PERIOD_NS
        return chunk.rows[k] if k < len(chunk.rows) else None


@dataclasses.dataclass
class _Episode:
    index: int
    task: str
    seed: int
    env: MetaWorldEnv
    obs: Observation
    narrator: Narrator
    expert: Expert | None
    baseline: Actor | None  # a baseline the sim runs (BASELINES)
    noise: DartNoise
    start_ns: int
    start_wall_s: float  # when the reset began
    reset_wall_s: float  # the reset's share of wall_s: Meta-World's task sampling, ~1 s
    accepted: int = 0
    rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    held: int = 0  # steps with no chunk row to run
    narration: list[str] = dataclasses.field(default_factory=list)
    memory: list[str] = dataclasses.field(default_factory=list)
    renders: int = 0
    render_wall_s: float = 0.0
    lockstep_timeouts: int = 0  # frames the loop stopped waiting for
    end_ns: int | None = None  # set when the episode is over
    next_instruction_ns: int = 0


class MetaWorldLoop:
    """The envs (one per task, reused across its episodes) advanced one step per tick."""

    def __init__(
        self, cfg: LoopConfig, port: Port, warn: Callable[[str], None] = lambda text: None
    ) -> None:
        self.cfg = cfg
        self._port = port
        self._warn = warn
        self.now_ns = round(cfg.start_s * NS_PER_S)
        self._inbox: collections.deque[ActionChunk] = collections.deque(maxlen=_INBOX_MAX)
        self._arrived = threading.Condition()  # guards the inbox and the lockstep marks
        self._frames = LockstepMarks()
        self._overflowed = 0  # chunks the full inbox dropped (written by `receive`)
        self._overflow_counted = 0
        self._envs: dict[str, MetaWorldEnv] = {}
        self._runner = ChunkRunner()
        self._next = 0
        self.ticks = 0
        self.episode: _Episode | None = None
        self.outcomes: list[dict[str, Any]] = []

    def receive(self, msg: ActionChunk) -> None:
        """A chunk from the policy (any thread); taken at the next tick."""
        with self._arrived:
            if len(self._inbox) == _INBOX_MAX:
                self._overflowed += 1
            self._inbox.append(msg)
            self._frames.chunk_seq = max(self._frames.chunk_seq, msg.sequence)
            self._arrived.notify_all()

    def frame_done(self, msg: EngineStats) -> None:
        """The policy node finished a frame (its stats come after its language work; any
        thread): what lockstep waits for."""
        with self._arrived:
            self._frames.finished(stamp_to_ns(msg.header.stamp), msg.frame)
            self._arrived.notify_all()

    def env(self, task: str) -> MetaWorldEnv:
        """The task's env, built on first use (on the loop's thread, which owns its GL)."""
        if task not in self._envs:
            self._envs[task] = MetaWorldEnv(task, self.cfg.camera_size)
        return self._envs[task]

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    def tick(self) -> bool:
        """One control period; False once every episode has ended (nothing was done)."""
        if self.episode is None or self.episode.end_ns is not None:
            if self.episode is not None:
                self._finish(self.episode)
            if self._next >= len(self.cfg.episodes):
                return False
            self._start()
        ep, t = self.episode, self.now_ns
        self._publish_sensors(ep, t)
        self._port.publish("clock", Clock(clock=ns_to_stamp(t)), t)
        if ep.expert is not None:
            self._expert_acts(ep, t)
        elif ep.baseline is not None:
            self._apply(ep, chunk_msg(ep.baseline(ep.obs)[None, :], t), t)
        else:
            self._await_frame(ep, t)
            self._drain_inbox(ep, t)
        if ep.obs.success or ep.obs.steps >= ep.env.max_path_length:
            ep.end_ns = t
        else:
            row = self._runner.row_at(t)
            ep.held += row is None
            ep.obs = ep.env.step(ep.env.hold() if row is None else row, render=False)
        self.now_ns += CONTROL_PERIOD_NS
        self.ticks += 1
        return True

    # ------------------------------------------------------------------ episodes

    def _start(self) -> None:
        task, seed = self.cfg.episodes[self._next]
        begin = time.monotonic()
        env = self.env(task)
        obs = env.reset(seed, render=False)
        policy = self.cfg.policy
        self.episode = _Episode(
            index=self._next,
            task=task,
            seed=seed,
            env=env,
            obs=obs,
            narrator=Narrator(task),
            expert=Expert(task) if policy == "expert" else None,
            baseline=baseline_actor(policy, task, seed, env) if policy in BASELINES else None,
            noise=DartNoise(self.cfg.noise, noise_rng(task, seed), len(ACTION_NAMES)),
            start_ns=self.now_ns,
            start_wall_s=begin,
            reset_wall_s=time.monotonic() - begin,
            next_instruction_ns=self.now_ns + NS_PER_S,
        )
        self._next += 1
        self._runner.clear()
        self._port.publish("instruction", String(data=instruction(task)), self.now_ns)

    def _finish(self, ep: _Episode) -> None:
        outcome = episode_outcome(ep, len(self.cfg.episodes), self.cfg.policy)
        self.outcomes.append(outcome)
        self._port.publish("episode", String(data=json.dumps(outcome)), self.now_ns)
        self.episode = None

    # ------------------------------------------------------------------ tick parts

    def _publish_sensors(self, ep: _Episode, t: int) -> None:
        stamp = ns_to_stamp(t)
        state = convert.joint_state_msg(STATE_NAMES, ep.obs.state, stamp=stamp, frame_id="world")
        joints = convert.joint_state_msg(SAWYER_JOINTS, ep.obs.joints, stamp=stamp, frame_id="")
        self._port.publish("state", state, t)
        self._port.publish("joints", joints, t)
        if ep.obs.steps % self.cfg.camera_every == 0:  # a tick steps the env once
            begin = time.perf_counter()
            pixels = ep.env.render()
            ep.render_wall_s += time.perf_counter() - begin
            ep.renders += 1
            image = convert.rgb8_image_msg(pixels, stamp=stamp, frame_id="corner2_optical_frame")
            self._port.publish("camera", image, t)
        if t >= ep.next_instruction_ns:
            self._port.publish("instruction", String(data=instruction(ep.task)), t)
            ep.next_instruction_ns += NS_PER_S
        line = ep.narrator.update(ep.obs)
        if not ep.narration or ep.narration[-1] != line.narration:
            ep.narration.append(line.narration)
            self._port.publish("narration", String(data=line.narration), t)
        if line.memory:
            ep.memory.append(line.memory)
            self._port.publish("memory", String(data=line.memory), t)

    def _expert_acts(self, ep: _Episode, t: int) -> None:
        """The clean action goes out (a target in the action space, not the scripted
        gains); the env runs it plus this tick's noise offset (zero without noise)."""
        action = ep.expert.target(ep.obs)
        self._port.publish("expert_chunk", chunk_msg(action[None, :], t), t)
        executed = np.clip(action + ep.noise.offset(), -1.0, 1.0)
        self._apply(ep, chunk_msg(executed[None, :], t), t)

    def _await_frame(self, ep: _Episode, t: int) -> None:
        """Lockstep: hold tick t until `lockstep_due` lets it go, or count a timeout and
        go on. Until the node's frame grid is known (`LockstepMarks.grid_ns`), each tick
        only waits a moment for a frame at that very tick: the one that shows the grid."""
        if not self.cfg.lockstep_ticks:
            return
        marks = self._frames
        due = functools.partial(lockstep_due, marks, t, self.cfg.lockstep_ticks)
        with self._arrived:
            if marks.frame_ns is not None and marks.grid_ns is None:
                self._arrived.wait_for(due, _GRID_PROBE_S)
            elif not self._arrived.wait_for(due, self.cfg.lockstep_timeout_s):
                ep.lockstep_timeouts += 1
                marks.let_go(t)
                self._warn(f"no frame done within {self.cfg.lockstep_timeout_s:g} s: going on")

    def _drain_inbox(self, ep: _Episode, t: int) -> None:
        """Every chunk received since the last tick, then what the full inbox lost."""
        with self._arrived:
            taken = list(self._inbox)
            self._inbox.clear()
        for msg in taken:
            self._apply(ep, msg, t)
        if self._overflowed > self._overflow_counted:
            ep.rejected["inbox_full"] += self._overflowed - self._overflow_counted
            self._overflow_counted = self._overflowed

    def _apply(self, ep: _Episode, msg: ActionChunk, t: int) -> None:
        """Hand one chunk to the runner, or count why not."""
        start = stamp_to_ns(msg.header.stamp) or t  # a zero stamp means "now"
        reason = "previous_episode" if start < ep.start_ns else chunk_rejection(msg)
        if reason is None:
            self._runner.add(Chunk(start, convert.action_chunk_rows(msg)))
            ep.accepted += 1
            return
        ep.rejected[reason] += 1
        self._warn(f"action chunk rejected ({reason}), holding")


@dataclasses.dataclass
class LockstepMarks:
    """What lockstep knows of the policy node: its frames done, their grid, its chunks."""

    frame_ns: int | None = None  # the tick of the newest frame done (None: none yet)
    frame_seq: int = -1  # that frame's number
    chunk_seq: int = -1  # the newest chunk's frame number
    grid_ns: int | None = None  # a tick the node's frame timer is due at (None: not known)

    def finished(self, tick_ns: int, frame: int) -> None:
        """The node finished the frame of tick `tick_ns`. The first frame may be off the
        grid (the timer, started before the clock, is overdue at the first /clock); the
        second ran at a due tick, where the loop was waiting for it."""
        if self.frame_ns is not None and self.grid_ns is None:
            self.grid_ns = tick_ns
        if self.frame_ns is None or tick_ns > self.frame_ns:
            self.frame_ns, self.frame_seq = tick_ns, frame

    def let_go(self, t: int) -> None:
        """Stop waiting for the frame due at t (the node skipped it): count it done."""
        self.frame_ns = max(self.frame_ns or t, t)
        self.chunk_seq = max(self.chunk_seq, self.frame_seq)


def lockstep_due(marks: LockstepMarks, t: int, frame_ticks: int) -> bool:
    """Whether tick t may run: the node, whose frame timer is due every `frame_ticks`
    ticks of the sim's clock, has finished its frame of the latest due tick at or before
    t, and that frame's chunk is here. The clock stands while the node works, so a frame
    reads the clock of its due tick, its work (language included) takes no sim time, and
    each chunk runs exactly the d control periods after its frame that the node stamps it
    with (its rtc_delay_steps). Before the grid is known: a frame at t itself."""
    if marks.frame_ns is None:
        return False
    if marks.grid_ns is None:
        return marks.frame_ns >= t
    period = frame_ticks * CONTROL_PERIOD_NS
    due = t - (t - marks.grid_ns) % period
    return marks.frame_ns >= due and marks.chunk_seq >= marks.frame_seq


def noise_rng(task: str, seed: int) -> np.random.Generator:
    """The noise stream of one episode: its own per task and seed, whatever ran before."""
    return np.random.default_rng([seed, MT10_TASKS.index(task)])


def chunk_msg(rows: np.ndarray, t: int, sequence: int = 0) -> ActionChunk:
    """H x 4 actions laid out as the oxygen node publishes them, stamped t (ns)."""
    actions = np.ascontiguousarray(rows, dtype=np.float32)
    horizon, width = actions.shape
    return ActionChunk(
        header=Header(stamp=ns_to_stamp(t)),
        sequence=sequence,
        horizon=horizon,
        action_dim=width,
        actions=array.array("f", actions.tobytes()),
        joint_names=list(ACTION_NAMES),
        control_period=Duration(nanosec=CONTROL_PERIOD_NS),
        deadline_met=True,
    )


def episode_outcome(ep: _Episode, episodes: int, policy: str) -> dict[str, Any]:
    """A finished episode as the JSON object published on /metaworld/episode."""
    counts = ep.env.counts
    return {
        "index": ep.index,
        "episodes": episodes,
        "task": ep.task,
        "seed": ep.seed,
        "instruction": instruction(ep.task),
        "policy": policy,
        "success": ep.obs.success,
        "steps": ep.obs.steps,
        "max_path_length": ep.env.max_path_length,
        "start_ns": ep.start_ns,
        "end_ns": ep.end_ns,
        "duration_s": (ep.end_ns - ep.start_ns) / NS_PER_S,
        "wall_s": time.monotonic() - ep.start_wall_s,
        "reset_wall_s": ep.reset_wall_s,
        "chunks_accepted": ep.accepted,
        "chunks_rejected": dict(sorted(ep.rejected.items())),
        "held_steps": ep.held,
        "actions_clipped": counts.clipped,
        "actions_malformed": counts.malformed,
        "renders": ep.renders,
        "render_wall_s": ep.render_wall_s,
        "lockstep_timeouts": ep.lockstep_timeouts,
        "narration": ep.narration,
        "memory": ep.memory,
    }
