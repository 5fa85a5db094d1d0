"""Why the arm's commands pass a limit at a take-over under `jtc`, on dev seeds.

    python scripts/experiments/takeover_causes.py [--episodes 10] [--delays 1,4] [--json]

Under `jtc` a new trajectory starts from the measured joints. Where the arm lags its
command (pressing on an object, or slowed by its servo), the first command after the
take-over steps back to where the arm is, and the sim's `SeamMeter` may count the
take-over over a velocity or acceleration limit although the arm itself never moves
that fast (the sim's servo clips it). This runs the shipped policy in process
(oxygen_core.train.rollout, replace, `jtc`, the gate and limits of config/sim_demo.yaml,
d = the link delay, as `oxygen-eval sweep` sets it) and sorts each take-over over a limit:

- "lag": no longer over once the commands before the take-over are shifted to end at the
  arm's measured joints (the arm had followed its command), as `SeamMeter` judges them:
  the step back is the cause;
- "own segment": still over: the new trajectory's own first segment, from a state the
  node could not see when it published.

It also counts control periods in which the arm's measured joints moved faster than
their velocity limits. It keeps every command and measured state of an episode by
wrapping the rollout's meter and link (`rollout.SeamMeter`, `rollout._Link.command`).
For docs/experiments/; not a claim. An experiment harness, not part of the package: it
runs from the checkout's venv.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
from pathlib import Path

import numpy as np

from oxygen_core.safety.limits import limits_from_files
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES
from oxygen_core.sim.executor import Takeover
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.seam import SeamMeter
from oxygen_core.sim.seeds import DEV
from oxygen_core.train import rollout
from oxygen_ros.pipeline import make_pipeline
from oxygen_ros.tools.configure import load_settings

FAMILIES = ("pick", "put", "push")
ARM = slice(0, len(JOINT_NAMES) - 1)  # the gripper is a setpoint: no rate bound


class _Recorder(SeamMeter):
    """The rollout's meter, keeping every command and the ticks of take-overs it counted
    over a limit (a seam closes three ticks after its take-over)."""

    last: _Recorder | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[np.ndarray] = []
        self.over_ticks: list[int] = []
        _Recorder.last = self

    def observe(self, command, takeover=None) -> None:
        self.commands.append(np.asarray(command, np.float64))
        closed = len(self._closed)
        super().observe(command, takeover)
        self.over_ticks += [len(self.commands) - 4 for s in self._closed[closed:] if s.over]


def _cause(commands, measured, tick, limits, dt) -> str:
    """ "lag" when the take-over at `tick` is within the limits once the commands before it
    are shifted to end where the arm was (it had followed its command), as a fresh
    `SeamMeter` judges the shifted commands; else "own segment"."""
    shifted = commands.copy()
    shifted[:tick] += measured[tick] - commands[tick - 1]
    meter = SeamMeter(dt, gripper=GRIPPER, limits=limits)
    for k in range(max(0, tick - 3), min(tick + 3, len(shifted))):
        takeover = Takeover(k * dt, shifted[k - 1], shifted[k], 0) if k == tick else None
        meter.observe(shifted[k], takeover)
    return "own segment" if meter.summary().takeovers_over else "lag"


def run(params: Path, seeds: range, delay: int) -> dict[str, object]:
    settings, _ = load_settings(params)
    engine = make_pipeline(settings).engine
    engine.cfg = dataclasses.replace(engine.cfg, rtc_delay_steps=delay)
    limits = limits_from_files(JOINT_NAMES, params)
    renderer, dt = Renderer(128, 128), 1.0 / settings.node.control_rate_hz
    measured: list[np.ndarray] = []
    command = rollout._Link.command

    def recording(link, tick, joints):
        measured.append(np.array(joints, np.float64))
        return command(link, tick, joints)

    rollout.SeamMeter, rollout._Link.command = _Recorder, recording
    causes: collections.Counter[str] = collections.Counter()
    takeovers, lag_max, arm_over = 0, 0.0, 0
    for seed in seeds:
        for family in FAMILIES:
            measured.clear()
            outcome = rollout.run_episode(
                engine, family, seed, settings.node.execute_horizon, renderer,
                link_delay=delay, limits=limits, controller="jtc",
            )  # fmt: skip
            commands, joints = np.array(_Recorder.last.commands), np.array(measured)
            takeovers += outcome.seams.seams
            moved = np.abs(np.diff(joints[:, ARM], axis=0)) / dt
            arm_over += int(np.sum(np.any(moved > limits.velocity[ARM] + 1e-6, axis=1)))
            for tick in _Recorder.last.over_ticks:
                causes[_cause(commands, joints, tick, limits, dt)] += 1
                lag = joints[tick, ARM] - commands[tick - 1, ARM]
                lag_max = max(lag_max, float(np.max(np.abs(lag))))
    return {
        "delay": delay,
        "seeds": f"{seeds.start}-{seeds[-1]}",
        "takeovers": takeovers,
        "over": sum(causes.values()),
        "causes": dict(causes),
        "largest_lag_rad": round(lag_max, 4),
        "arm_periods_over_velocity": arm_over,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("config/sim_demo.yaml"))
    parser.add_argument("--episodes", type=int, default=10, help="dev seeds per family")
    parser.add_argument("--delays", default="1,4", help="link delays in control steps")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [run(args.params, DEV[: args.episodes], int(d)) for d in args.delays.split(",")]
    for row in rows:
        print(json.dumps(row) if args.json else _line(row))


def _line(row: dict[str, object]) -> str:
    causes = ", ".join(f"{k} {v}" for k, v in sorted(row["causes"].items()))
    return (
        f"d = {row['delay']} (dev {row['seeds']}): {row['over']} of {row['takeovers']} "
        f"take-overs over a limit ({causes}); largest lag {row['largest_lag_rad']} rad; "
        f"periods the arm moved over its velocity limit: {row['arm_periods_over_velocity']}"
    )


if __name__ == "__main__":
    main()
