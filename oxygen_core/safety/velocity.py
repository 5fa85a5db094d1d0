"""Joint velocity commands within the robot's bounds, each row's direction kept.

A robot driven in joint velocities (`RobotConfig.action_space` velocity: DROID's Franka)
gets no position trajectory for the chunk gate to judge; what can break its limits is a
row's speed. A row in which some joint passes its `max_velocity` is scaled down as a
whole, by the one factor that brings that joint onto its bound, as DROID's own IK solver
rescales a velocity action (droid `robot_ik_solver.py`, `joint_velocity_to_delta`): the
joints keep moving together in the direction the policy chose, only slower. Gripper
dimensions are positions, with an infinite bound here, and pass unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class VelocityCap:
    """max_velocity per action column (inf: not a velocity, or a bound switched off)."""

    bounds: np.ndarray  # float64 [A], > 0

    def cap(self, rows: np.ndarray) -> tuple[np.ndarray, float]:
        """rows [H, A] -> the rows with every |v| within its bound, and the smallest factor
        a row was scaled by (1.0: none was)."""
        rows = np.asarray(rows, np.float64)
        velocity = np.isfinite(self.bounds)
        share = np.abs(rows[:, velocity]) / self.bounds[velocity]  # 1 = on the bound
        factor = 1.0 / np.maximum(share.max(axis=1, initial=0.0), 1.0)  # [H]
        capped = rows.copy()
        capped[:, velocity] *= factor[:, None]
        return capped.astype(np.float32), float(factor.min(initial=1.0))
