"""`oxygen-eval manifest`: many bags and sim seeds x many configurations, on Ray.

A manifest (manifest.py) names inputs and configurations; their product is a list of
tasks with stable ids, one output folder each (tasks.py). Every task is exactly one run
of an existing tool: a bag is one `oxygen-bag replay` through `replay_offline`, a batch of
sim seeds one `oxygen-eval node` through `sim.evaluate.run_sim_eval`, so a task's report.json
and output bag are what that tool writes when run by hand. Ray runs them (runner.py): by
default on a local instance the tool starts and stops, bound to loopback, or on an
existing cluster (`--address`). A worker is a Ray actor bound to one configuration; it
keeps its compiled engine across tasks (restarted between bags, see
pipeline.restart_pipeline), so compile time is paid once per worker and configuration,
not once per bag (sim tasks start their node as a process of their own: no reuse; each
worker actor has its own ROS_DOMAIN_ID for them, domains.py). The driver, not Ray, owns
retries: a task that raises or whose worker dies is recorded in error.json and queued
again, up to a limit, while the other workers go on. A task is finished when its marker
(task.json) exists; it is written last and atomically, so a rerun skips exactly the
finished tasks. The aggregate report (aggregate.py) is computed from the per-task
report.json files only.
"""
