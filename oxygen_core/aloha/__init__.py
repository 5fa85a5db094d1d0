"""gym-aloha's bimanual ALOHA (two ViperX arms in MuJoCo, through dm_control) as the
project's third simulated world, with no ROS imports: `env` drives one task, transfer-cube
or insertion, with 14 absolute joint targets at 50 Hz from seeded object poses, reports the
task's own reward and success and renders its cameras headless; `expert` writes scripted
demonstrations from the task geometry, end-effector waypoints run in the mocap variant of the
scene and recorded as the joint targets that replay them in the joint-space env.
"""

# Before mujoco and dm_control (every module of this package imports them): MUJOCO_GL=egl.
import oxygen_core.mujoco_view  # noqa: F401
