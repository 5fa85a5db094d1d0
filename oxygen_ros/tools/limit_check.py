"""`oxygen-bag limit-check`: count what a bag's joint trajectories command outside the limits.

    oxygen-bag limit-check BAG --params config/sim.yaml [--json] [--fail-on-violation]
    oxygen-bag limit-check BAG --urdf robot.urdf --limits joint_limits.yaml [--topic T]
    oxygen-bag limit-check BAG --params config/sim.yaml --controller jtc [--update-rate HZ]

Every trajectory topic the node publishes is checked (one per controller where the params
split the commands over controllers, as config/aloha.yaml's two arms and two grippers),
each on its own: its joints, its seams. `--topic` (repeatable) names others.

An independent check of the controller output (the node's ~/joint_trajectory): it reads
the limits as the node does (the URDF, then the params' `joint_limits` block, merged by
`oxygen_core.safety.limits`) but computes every violation with its own arithmetic here,
never with `oxygen_core.safety.gate`, so a bug in the gate shows up as counts.

Conventions. Point k of a trajectory runs at its header stamp (a zero stamp: the bag's
log time, "now") + time_from_start. Counted per point, once per kind whatever the number
of joints over (the worst joint is what a finding names):

- position: a point outside [min_position, max_position];
- velocity: a step into a point faster than max_velocity: (q_k - q_{k-1}) over their time
  difference. The step into a trajectory's first point comes from where the previous
  trajectory had the arm then: its last point before that time (what the controller
  commanded last), so a seam between chunks is a step like any other;
- acceleration: the change of those velocities over the mean of their two time steps,
  at each point whose next step belongs to the trajectory (the previous trajectory's last
  commanded point included: the seam's acceleration);
- jump: the first point against the latest JointState in the bag stamped at or before
  the trajectory's stamp, beyond max_jump (joints the state lacks are not compared).

With `--controller jtc` (or jtc_replacement) the count is of what that controller would
command instead, update by update, the segment from the state at each arrival included
(oxygen_ros.tools.limit_sampling; from the running command where the params say the
controllers interpolate from their desired state); jump is then not counted.

A message on the reset topic (`--reset-topic`, by default the simulator's /sim/episode,
one per finished episode, when the bag has it) says the robot was moved between two
trajectories (an episode reset puts the arm home): the first trajectory logged after it
has no previous command, so its first step and seam are not measured from the episode
before. What the sim dropped is not counted at all (`previous_episode`): a trajectory
logged within `--reset-settle-s` after a reset (the sim's reset_settle_s, while it held the
node switched off), or stamped before the reset (computed for the episode before).

A value counts when it exceeds its limit by more than 1e-9 (float noise on a limit is
not a violation; oxygen_ros.tools.limit_findings). The exit code is 0 whatever the counts
(a measurement), 1 with --fail-on-violation when any count is above 0, 2 on bad input (one
line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from oxygen_core.clock import NS_PER_S
from oxygen_core.safety.limits import JointLimits, limits_from_files
from oxygen_core.sim.executor import CONTROLLERS, Trajectory
from oxygen_ros import topics
from oxygen_ros.convert import stamp_to_ns
from oxygen_ros.tools.bagio import BagReadError, from_cdr, read_bag
from oxygen_ros.tools.limit_findings import Finding, outside, over
from oxygen_ros.tools.limit_sampling import Arrival, JointSample, sampled
from oxygen_ros.tools.sim.loop import RESET_SETTLE_S

KINDS = ("position", "velocity", "acceleration", "jump")
DEFAULT_TOPICS = ("/oxygen/joint_trajectory", "/joint_states")  # the node's defaults
RESET_TOPIC = "/sim/episode"  # oxygen-sim's episode outcomes: one per reset


@dataclasses.dataclass(frozen=True)
class Commanded:
    """One trajectory of the bag: its points' absolute times (ns) and positions."""

    index: int  # its number on the topic, from 0
    joint_names: tuple[str, ...]
    times_ns: np.ndarray  # int64 [K]
    positions: np.ndarray  # float64 [K, J]
    measured: dict[str, float] | None  # the latest joint state at or before its stamp
    after_reset: bool = False  # a reset came between the previous trajectory and this one
    stamp_ns: int = 0  # its header stamp (a zero stamp: its log time)
    arrival_ns: int = 0  # its log time: when a controller got it
    zero_stamp: bool = False  # stamped zero: "on arrival"
    velocities: np.ndarray | None = None  # float64 [K, J], when its points carry them


# --------------------------------------------------------------------------- counting


def check(trajectories: Iterable[Commanded], limits: JointLimits) -> list[Finding]:
    """Every finding, trajectory by trajectory (module docstring)."""
    findings: list[Finding] = []
    previous: Commanded | None = None
    for traj in trajectories:
        order = [traj.joint_names.index(n) for n in limits.names]
        current = dataclasses.replace(traj, positions=traj.positions[:, order])
        previous = None if traj.after_reset else previous
        findings += _positions(current, limits)
        findings += _rates(current, _before(previous, current), limits)
        findings += _jump(current, limits)
        previous = current
    return findings


def _positions(traj: Commanded, limits: JointLimits) -> list[Finding]:
    """Points outside the position range; a finding's limit is the bound it crossed."""
    found = []
    for k, row in enumerate(traj.positions):
        found += outside(traj.index, k, int(traj.times_ns[k]), row, limits)
    return found


def _before(previous: Commanded | None, traj: Commanded) -> tuple[np.ndarray, np.ndarray]:
    """The previous trajectory's last two points before `traj`'s first (times, positions):
    where the controller had the arm when `traj` takes over."""
    if previous is None:
        return np.zeros(0, np.int64), np.zeros((0, traj.positions.shape[1]))
    ran = previous.times_ns < traj.times_ns[0]
    return previous.times_ns[ran][-2:], previous.positions[ran][-2:]


def _rates(
    traj: Commanded, before: tuple[np.ndarray, np.ndarray], limits: JointLimits
) -> list[Finding]:
    """Velocity into each point (from the previous command when there is one) and the
    acceleration at each point whose next step is this trajectory's."""
    times = np.concatenate([before[0], traj.times_ns]).astype(np.float64) / NS_PER_S
    points = np.vstack([before[1], traj.positions])
    lead = len(before[0])  # points of the previous trajectory in front
    spans = np.diff(times)
    velocity = np.diff(points, axis=0) / spans[:, None]  # step i: into point i + 1
    acceleration = np.diff(velocity, axis=0) / ((spans[1:] + spans[:-1]) / 2)[:, None]
    found = []
    # velocity[i] ends at point i + 1, acceleration[i] is centred on it: both belong to
    # this trajectory when that point's next step is one of its steps.
    for kind, values, bound, first in (
        ("velocity", velocity, limits.velocity, max(lead - 1, 0)),
        ("acceleration", acceleration, limits.acceleration, max(lead - 2, 0)),
    ):
        for i in range(first, len(values)):
            point = i + 1 - lead
            time_ns = int(traj.times_ns[max(point, 0)])
            found += over(kind, traj.index, point, time_ns, values[i], bound, limits.names)
    return found


def _jump(traj: Commanded, limits: JointLimits) -> list[Finding]:
    """The first point against the measured state, over the joints the state has."""
    if traj.measured is None:
        return []
    known = [j for j, n in enumerate(limits.names) if n in traj.measured]
    names = tuple(limits.names[j] for j in known)
    gap = traj.positions[0, known] - np.array([traj.measured[n] for n in names])
    return over("jump", traj.index, 0, int(traj.times_ns[0]), gap, limits.jump[known], names)


def _severity(f: Finding) -> float:
    return abs(f.value - f.limit) if f.kind == "position" else abs(f.value) / f.limit


@dataclasses.dataclass(frozen=True)
class Summary:
    """Counts per kind and the worst findings of each (largest |value| / limit)."""

    trajectories: int
    points: int
    counts: dict[str, int]
    worst: dict[str, list[Finding]]

    @classmethod
    def of(cls, trajectories: Sequence[Commanded], findings: Sequence[Finding], top: int):
        by_kind = {k: [f for f in findings if f.kind == k] for k in KINDS}
        return cls(
            trajectories=len(trajectories),
            points=sum(len(t.times_ns) for t in trajectories),
            counts={k: len(fs) for k, fs in by_kind.items()},
            worst={k: sorted(fs, key=_severity, reverse=True)[:top] for k, fs in by_kind.items()},
        )

    @classmethod
    def total(cls, parts: Sequence[Summary], top: int) -> Summary:
        """The sums of several topics' summaries, the worst of all of them."""
        worst = {k: [f for part in parts for f in part.worst[k]] for k in KINDS}
        return cls(
            trajectories=sum(p.trajectories for p in parts),
            points=sum(p.points for p in parts),
            counts={k: sum(p.counts[k] for p in parts) for k in KINDS},
            worst={k: sorted(fs, key=_severity, reverse=True)[:top] for k, fs in worst.items()},
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "points": self.points,
            "counts": self.counts,
            "worst": {k: [dataclasses.asdict(f) for f in fs] for k, fs in self.worst.items()},
        }


# --------------------------------------------------------------------------- the bag


def read_trajectories(
    bag: Path,
    topic: str,
    state_topic: str,
    reset_topic: str | None = None,
    settle_s: float = RESET_SETTLE_S,
) -> tuple[list[Commanded], list[JointSample]]:
    """The trajectories on `topic` in log-time order, each with the latest joint state
    stamped at or before its stamp and whether a message on `reset_topic` came since the
    trajectory before; and every joint state. What the sim dropped after a reset is left
    out: one logged within `settle_s` of it or stamped before it (module docstring).
    ValueError when the topic has none."""
    trajectories: list[Commanded] = []
    states: list[JointSample] = []
    reset, reset_ns = False, None
    for message in read_bag(bag, [topic, state_topic, reset_topic]):
        if message.topic == reset_topic:
            reset, reset_ns = True, message.time_ns
            continue
        msg = from_cdr(message.data, message.msgtype)
        stamp = stamp_to_ns(msg.header.stamp) or message.time_ns  # zero: "now"
        if message.topic == state_topic:
            states.append(_sample(msg, stamp))
        elif msg.points and not _dropped(stamp, message.time_ns, reset_ns, settle_s):
            commanded = _commanded(len(trajectories), msg, stamp, states, reset)
            trajectories.append(_arrived(commanded, msg, message.time_ns))
            reset = False
    if not trajectories:
        raise ValueError(f"bag {bag} has no JointTrajectory with points on {topic}")
    return trajectories, states


def _dropped(stamp_ns: int, arrival_ns: int, reset_ns: int | None, settle_s: float) -> bool:
    """Whether the sim dropped a trajectory after the last reset (`reset_ns`; None: none yet)
    as previous_episode."""
    if reset_ns is None:
        return False
    return stamp_ns < reset_ns or arrival_ns < reset_ns + round(settle_s * NS_PER_S)


def _sample(msg: Any, stamp: int) -> JointSample:
    """A JointState as a sample; its velocities only where it has one per joint."""
    velocities = list(msg.velocity) if len(msg.velocity) == len(msg.name) else []
    return JointSample(
        stamp,
        dict(zip(msg.name, msg.position, strict=False)),
        dict(zip(msg.name, velocities, strict=False)),
    )


def _commanded(
    index: int, msg: Any, stamp: int, states: list[JointSample], after_reset: bool
) -> Commanded:
    measured = [s.positions for s in states if s.stamp_ns <= stamp]
    return Commanded(
        index=index,
        stamp_ns=stamp,
        joint_names=tuple(msg.joint_names),
        times_ns=np.array([stamp + stamp_to_ns(p.time_from_start) for p in msg.points]),
        positions=np.array([list(p.positions) for p in msg.points], np.float64),
        measured=measured[-1] if measured else None,
        after_reset=after_reset,
    )


def _arrived(traj: Commanded, msg: Any, arrival_ns: int) -> Commanded:
    """`traj` with what a controller model needs: its arrival, stamp and velocities."""
    carried = [list(p.velocities) for p in msg.points]
    velocities = np.array(carried, np.float64) if all(carried) else None
    return dataclasses.replace(
        traj,
        arrival_ns=arrival_ns,
        zero_stamp=stamp_to_ns(msg.header.stamp) == 0,
        velocities=velocities,
    )


def arrivals(trajectories: Sequence[Commanded], controller: str) -> list[Arrival]:
    """The trajectories as `controller`'s model receives them (limit_sampling)."""
    return [_arrival(t, controller) for t in trajectories]


def _arrival(traj: Commanded, controller: str) -> Arrival:
    """A zero stamp stays zero for "jtc" (its take-over update); "jtc_replacement" gets
    the arrival, as the sim node resolves it."""
    start = 0.0 if traj.zero_stamp and controller == "jtc" else traj.stamp_ns / NS_PER_S
    trajectory = Trajectory(
        traj.joint_names,
        start,
        ((traj.times_ns - traj.stamp_ns) / NS_PER_S).tolist(),
        traj.positions.tolist(),
        None if traj.velocities is None else traj.velocities.tolist(),
    )
    return Arrival(
        traj.index, traj.arrival_ns, trajectory, traj.zero_stamp, traj.after_reset, traj.measured
    )


@dataclasses.dataclass(frozen=True)
class Wiring:
    """The node's controller outputs as its params resolve them."""

    trajectory_topics: list[str]  # one per controller where the commands are split
    joint_state_topic: str
    from_desired: bool  # the controllers start each trajectory from their last command


def resolved(params: Path | None) -> Wiring:
    """The wiring of the node with these params (None: the node's defaults)."""
    if params is None:
        return Wiring([DEFAULT_TOPICS[0]], DEFAULT_TOPICS[1], False)
    from oxygen_ros.tools.configure import load_settings  # starts an rclpy context

    settings, names = load_settings(params)
    trajectories = list(names.per_stream(topics.JOINT_TRAJECTORY).values())
    if not trajectories:
        raise ValueError(f"{params}: the node publishes no joint_trajectory with these params")
    desired = settings.node.interpolate_from_desired_state
    return Wiring(trajectories, names.joint_state, desired)


# --------------------------------------------------------------------------- output


def table(bag: Path, topic: str, limits: JointLimits, summary: Summary) -> str:
    """The counts and worst cases of one topic, for people."""
    lines = [
        f"{bag}: {summary.trajectories} trajectories, {summary.points} points on {topic}; "
        f"limits from {limits.source}",
        "",
        f"{'kind':<13}{'count':>7}  worst",
    ]
    for kind in KINDS:
        worst = summary.worst[kind]
        lines.append(
            f"{kind:<13}{summary.counts[kind]:>7}  {_describe(worst[0]) if worst else '-'}"
        )
        lines += [f"{'':<22}{_describe(f)}" for f in worst[1:]]
    return "\n".join(lines)


def _describe(f: Finding) -> str:
    where = "the seam" if f.point < 0 else f"point {f.point}"
    return (
        f"{f.joint} {f.value:+.4f} vs limit {f.limit:.4f} (trajectory {f.trajectory}, {where}, "
        f"t {f.time_ns / NS_PER_S:.3f} s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-bag limit-check`."""
    parser = argparse.ArgumentParser(
        prog="oxygen-bag limit-check",
        description="Count a bag's joint trajectory points outside the robot's position, "
        "velocity and acceleration limits, and start jumps from the measured state, with "
        "arithmetic of its own (not the node's chunk gate).",
    )
    parser.add_argument("bag", type=Path)
    parser.add_argument("--params", type=Path, help="the node's params YAML: topics, URDF, block")
    parser.add_argument("--urdf", type=Path, help="the robot's URDF (instead of the params')")
    parser.add_argument("--limits", type=Path, help="a joint_limits YAML (instead of the params')")
    parser.add_argument(
        "--topic",
        action="append",
        help="JointTrajectory topic, repeatable (default: every one the node publishes)",
    )
    parser.add_argument("--joint-state-topic", help="JointState topic (default: as the node's)")
    parser.add_argument(
        "--reset-topic",
        default=RESET_TOPIC,
        help="a message on it marks a reset: the next trajectory has no previous command "
        f"(default {RESET_TOPIC}, the simulator's episode outcomes; '' for none)",
    )
    parser.add_argument(
        "--reset-settle-s",
        type=float,
        default=RESET_SETTLE_S,
        help="the sim's reset_settle_s: what it logged that long after a reset, the sim "
        f"dropped (default {RESET_SETTLE_S})",
    )
    parser.add_argument(
        "--controller",
        choices=("points", *CONTROLLERS),
        default="points",
        help="points: the points and the steps between them, as sent (default); jtc or "
        "jtc_replacement: every sample that controller's model commands from them, the "
        "segment from the state at each arrival included",
    )
    parser.add_argument(
        "--update-rate",
        type=float,
        default=500.0,
        help="the controller's update rate for --controller jtc/jtc_replacement (Hz)",
    )
    parser.add_argument("--top", type=int, default=3, help="worst cases listed per kind")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--fail-on-violation", action="store_true", help="exit 1 when any count is above 0"
    )
    args = parser.parse_args(argv)
    if args.params is None and args.urdf is None and args.limits is None:
        parser.error("give --params, or --urdf and/or --limits")
    try:
        checked = _run(args)
    except (ValueError, OSError, BagReadError, yaml.YAMLError) as error:
        print(f"oxygen-bag limit-check: {error}", file=sys.stderr)
        return 2
    total = Summary.total([summary for _, summary, _ in checked], args.top)
    if args.json:
        by_topic = {topic: summary.as_dict() for topic, summary, _ in checked}
        print(json.dumps({"bag": str(args.bag), "topics": list(by_topic),
                          "limits": checked[0][2].source, **total.as_dict(),
                          "by_topic": by_topic}, indent=1))  # fmt: skip
    else:
        print("\n\n".join(table(args.bag, t, limits, summary) for t, summary, limits in checked))
        if len(checked) > 1:
            counts = ", ".join(f"{k} {n}" for k, n in total.counts.items())
            print(f"\nall {len(checked)} topics: {counts}")
    return int(args.fail_on_violation and any(total.counts.values()))


def _run(args: argparse.Namespace) -> list[tuple[str, Summary, JointLimits]]:
    """(topic, summary, limits) of every trajectory topic checked."""
    if not args.bag.exists():
        raise ValueError(f"bag {args.bag} does not exist")
    wiring = resolved(args.params)
    state_topic = args.joint_state_topic or wiring.joint_state_topic
    trajectory_topics = args.topic or wiring.trajectory_topics
    return [_run_topic(args, t, state_topic, wiring) for t in trajectory_topics]


def _run_topic(
    args: argparse.Namespace, topic: str, state_topic: str, wiring: Wiring
) -> tuple[str, Summary, JointLimits]:
    trajectories, states = read_trajectories(
        args.bag, topic, state_topic, args.reset_topic or None, args.reset_settle_s
    )
    joints = list(dict.fromkeys(n for t in trajectories for n in t.joint_names))
    for t in trajectories:
        if sorted(t.joint_names) != sorted(joints):
            raise ValueError(
                f"trajectory {t.index} on {topic} names {list(t.joint_names)}, not {joints}"
            )
    limits = limits_from_files(joints, args.params, args.urdf, args.limits)
    if args.controller == "points":
        return topic, Summary.of(trajectories, check(trajectories, limits), args.top), limits
    if not args.update_rate > 0:
        raise ValueError(f"--update-rate must be > 0, got {args.update_rate}")
    received = arrivals(trajectories, args.controller)
    samples, updates = sampled(
        received, limits, args.controller, args.update_rate, states, wiring.from_desired
    )
    summary = Summary.of(trajectories, samples, args.top)
    return topic, dataclasses.replace(summary, points=updates), limits


if __name__ == "__main__":
    sys.exit(main())
