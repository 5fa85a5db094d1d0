"""The touch-probe baseline: what a policy that cannot see can do by feeling the table.

It reads the instruction (family, the target's shape, a push's direction; never the
colour) and the joints, nothing else. Closed fingers lowered onto the table stop on what
is under them, and the joints then tell the height they stopped at: a ball's top (4.4 cm),
a block's top or a bowl's rim (4 cm), a bowl's floor (0.6 cm), the table. So it probes:

    search    closed fingers lowered at the nodes of a LATTICE over the workspace, nearest
              to the arm first, travelling between them above every object's top;
    localise  a hit is probed again at four points CROSS around it; the hits' mean is the
              object's centre estimate, and a floor reading among them makes it a bowl;
    act       the first object of the instructed shape found is acted on as the expert
              would: grasped (the gripper's stop tells whether the instructed shape is
              between the fingers; a miss is retried at RETRIES offsets, then the search
              goes on) and lifted (pick) or carried over the first bowl found and dropped
              from above its rim (put; the search goes on until both are found), or pushed
              from behind along the instructed way (push).

Touch cannot tell an object from its twin of another colour (oxygen_core.sim.tasks), so in
a twin scene it acts on whichever it finds first, and the episode's verdict comes with that
first lift, release or push. Time is the other limit: a probe costs about half a second, so
a search covers part of the workspace within a time limit of 3x the expert's.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from oxygen_core.sim import arm
from oxygen_core.sim.scene import (
    BALL_RADIUS,
    BLOCK_SIDE,
    BOWL_RIM,
    WORKSPACE_X,
    WORKSPACE_Y,
    SceneObject,
)
from oxygen_core.sim.scripting import OPEN, SHUT, Course, course, held_shape, parse_instruction
from oxygen_core.sim.tasks import PUSH_DIRECTIONS, PUSH_DISTANCE
from oxygen_core.sim.world import PUSHER_RADIUS

TRAVEL = 0.048  # grip point height between probes: above every object's top (4.4 cm)
DEEP, SHALLOW = 0.0, 0.03  # a probe's lowest point: to a bowl's floor (put), below the tops
LATTICE = 0.05  # m between search probes
SKIP = 0.06  # search probes this near a hit are left out: they would find it again
CROSS = 0.02  # m from a hit to the probes that localise it ...
AROUND = ((1, 0), (-1, 0), (0, 1), (0, -1))  # ... in these directions
SETTLE = 2  # control steps after an action's last row before its joints are read
RETRIES = 2  # grasps at an offset after a miss
CLOSED = 0.0  # the gripper shut with nothing between the fingers
GRASP_HEIGHT, PUSH_HEIGHT, CARRY = 0.018, 0.012, 0.12
TOLERANCE = 0.0015  # m: a reading within this of a known top is that top
# A bowl's rim (BOWL_HEIGHT) reads as a block's top: localising tells them apart.
TOPS = {"ball": 2 * BALL_RADIUS, "block": BLOCK_SIDE}
FLOOR = (0.003, 0.012)  # readings inside a bowl
# Where closed fingers read a bowl's floor, its rim, the table: rings around its centre.
BOWL_READINGS = {
    "floor": (0.0, BOWL_RIM - PUSHER_RADIUS + 1e-9),
    "block": (BOWL_RIM - PUSHER_RADIUS, BOWL_RIM + PUSHER_RADIUS),
    None: (BOWL_RIM + PUSHER_RADIUS, np.inf),
}


@dataclasses.dataclass(frozen=True)
class Action:
    """One step of the plan: what to do where; `cluster` ties localising probes."""

    kind: str  # probe, grasp, open, lift, carry (put: over the bowl, drop), push, rest
    xy: np.ndarray
    cluster: int = -1  # a localising probe's hit; -1: a search probe


class TouchProbe:
    """Search, localise, act (module docstring); one decision per finished action."""

    def __init__(self) -> None:
        self.reset("pick up the red block")

    def reset(self, instruction: str) -> None:
        self._family, self._shape, self._direction = parse_instruction(instruction)
        self._agenda = collections.deque(Action("probe", xy) for xy in search_lattice())
        self._action: Action | None = None
        self._course = Course(np.empty((0, arm.NUM_JOINTS)))
        self._clusters: list[list[tuple[np.ndarray, str | None]]] = []
        self._target: np.ndarray | None = None  # a found object of the instructed shape
        self._bowl: np.ndarray | None = None
        self._tried: list[np.ndarray] = []  # targets given up on
        self._tries = 0

    def chunk(self, state: np.ndarray, step: int, rows: int) -> np.ndarray:
        state = np.asarray(state, np.float64)
        if self._action is None or step >= self._course.start + len(self._course.rows) + SETTLE:
            if self._action is not None:
                self._observe(state)
            self._action = self._agenda.popleft() if self._agenda else Action("rest", np.zeros(2))
            self._course = Course(course(state, self._waypoints(state, self._action)), step)
        return self._course.window(step, rows)

    # ------------------------------------------------------------------ what happened

    def _observe(self, state: np.ndarray) -> None:
        action = self._action
        if action.kind == "probe":
            self._felt(action, reading(arm.forward(state).grip[2]))
        elif action.kind == "grasp":
            self._grasped(action, held_shape(float(state[arm.GRIPPER])) == self._shape)

    def _felt(self, probe: Action, felt: str | None) -> None:
        if probe.cluster < 0:
            if felt is None:
                return
            self._clusters.append([(probe.xy, felt)])
            k = len(self._clusters) - 1
            around = [probe.xy + CROSS * np.array(d) for d in AROUND]
            self._agenda.extendleft(reversed([Action("probe", xy, k) for xy in around]))
            self._skip_near(probe.xy)
            return
        cluster = self._clusters[probe.cluster]
        cluster.append((probe.xy, felt))
        if len(cluster) == 1 + len(AROUND):
            self._found(cluster)

    def _skip_near(self, xy: np.ndarray) -> None:
        """Search probes on an object just found would only find it again."""
        self._agenda = collections.deque(
            a for a in self._agenda if a.cluster >= 0 or np.hypot(*(a.xy - xy)) > SKIP
        )

    def _found(self, cluster: list[tuple[np.ndarray, str | None]]) -> None:
        """A localised object: where readings fit the instructed shape, that shape; else
        where they fit a bowl (its floor, its rim, the table around it), a bowl."""
        radius = SceneObject("red", self._shape, np.zeros(3)).radius + PUSHER_RADIUS
        shape = centre(cluster, {self._shape: (0.0, radius), None: (radius, np.inf)})
        bowl = centre(cluster, BOWL_READINGS)
        if shape is not None and self._target is None:
            if all(np.hypot(*(shape - t)) > CROSS for t in self._tried):
                self._target = shape
        elif bowl is not None and self._bowl is None:
            self._bowl = bowl
        if self._target is None or (self._family == "put" and self._bowl is None):
            return
        kind = "push" if self._family == "push" else "grasp"
        self._agenda.appendleft(Action(kind, self._target))

    def _grasped(self, grasp: Action, holding: bool) -> None:
        if holding:
            after = Action("lift", grasp.xy) if self._family == "pick" else None
            after = after or Action("carry", self._bowl)
            self._agenda = collections.deque([after])
            return
        self._agenda.appendleft(Action("open", grasp.xy))  # let go of whatever it caught
        if self._tries < RETRIES:  # the centre estimate missed: try beside it
            self._tries += 1
            offset = CROSS * np.array([(-1) ** self._tries, 0.0])
            self._agenda.insert(1, Action("grasp", self._target + offset))
            return
        self._tried.append(self._target)  # give it up and search on
        self._target, self._tries = None, 0

    # ------------------------------------------------------------------ what to do

    def _waypoints(self, state: np.ndarray, action: Action) -> list[tuple[np.ndarray, float]]:
        x, y = action.xy
        here = arm.forward(state).grip
        up = [(np.array([here[0], here[1], max(here[2], TRAVEL)]), float(state[arm.GRIPPER]))]
        if action.kind == "probe":
            # A rim reads as a block's top: only a bowl's floor tells it apart.
            bottom = SHALLOW if self._family != "put" and self._shape == "ball" else DEEP
            return [*up, (np.array([x, y, TRAVEL]), CLOSED), (np.array([x, y, bottom]), CLOSED)]
        if action.kind == "grasp":
            low = np.array([x, y, GRASP_HEIGHT])
            return [*up, (np.array([x, y, TRAVEL]), OPEN), (low, OPEN), (low, SHUT), (low, SHUT)]
        if action.kind == "open":
            return [(here, OPEN)]
        if action.kind == "lift":
            return [(np.array([here[0], here[1], CARRY]), SHUT)]
        if action.kind == "carry":
            over = np.array([x, y, CARRY])
            return [(np.array([here[0], here[1], CARRY]), SHUT), (over, SHUT), (over, 1.0)]
        if action.kind == "push":
            return self._push(action.xy, up)
        return [(here, float(state[arm.GRIPPER]))]  # rest: stay

    def _push(self, centre: np.ndarray, up: list) -> list[tuple[np.ndarray, float]]:
        way = PUSH_DIRECTIONS[self._direction]
        reach = SceneObject("red", self._shape, np.zeros(3)).radius + PUSHER_RADIUS
        behind, end = centre - way * (reach + 0.02), centre + way * (PUSH_DISTANCE + 0.03)
        return [
            *up,
            (np.array([*behind, TRAVEL]), CLOSED),
            (np.array([*behind, PUSH_HEIGHT]), CLOSED),
            (np.array([*(end - way * reach), PUSH_HEIGHT]), CLOSED),
            (np.array([*(end - way * reach), TRAVEL]), CLOSED),
        ]


def reading(height: float) -> str | None:
    """What closed fingers that stopped at `height` (grip point, m) stand on: "ball",
    "block" (a block's top or a bowl's rim), "floor" (inside a bowl), None (the table)."""
    for shape, top in TOPS.items():
        if abs(height - top) <= TOLERANCE:
            return shape
    return "floor" if FLOOR[0] < height < FLOOR[1] else None


def centre(
    cluster: list[tuple[np.ndarray, str | None]], rings: dict[str | None, tuple[float, float]]
) -> np.ndarray | None:
    """Where an object's centre can be, given a cluster's probes: each reading in `rings`
    puts the centre within its (inner, outer) distance of the probe (a reading not named
    counts as None's ring); the mean of the centres on a 2 mm grid that fit them all, None
    when none does (the readings are not of such an object)."""
    first = cluster[0][0]
    span = np.arange(-0.08, 0.0801, 0.002)
    grid = first + np.stack(np.meshgrid(span, span), axis=-1).reshape(-1, 2)
    fits = np.ones(len(grid), bool)
    for xy, felt in cluster:
        inner, outer = rings.get(felt, rings[None])
        distance = np.hypot(*(grid - xy).T)
        fits &= (distance >= inner) & (distance < outer)
    return grid[fits].mean(axis=0) if fits.any() else None


def search_lattice() -> list[np.ndarray]:
    """The search probes: rows along y, a snake, the row nearest the arm first."""
    xs = np.arange(WORKSPACE_X[0] + 0.02, WORKSPACE_X[1], LATTICE)
    ys = np.arange(WORKSPACE_Y[0] + 0.02, WORKSPACE_Y[1], LATTICE)
    return [np.array([x, y]) for k, x in enumerate(xs) for y in (ys if k % 2 else ys[::-1])]
