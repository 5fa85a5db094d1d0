"""`oxygen-eval`: many bags (later: sim seeds) x many configurations, on Ray.

A manifest (manifest.py) names inputs and configurations; their product is a list of
tasks with stable ids, one output folder each (tasks.py). Every task is exactly one
`oxygen-replay` through `replay_offline`, so a task's report.json and output bag are
what a sequential replay writes. Ray runs them (runner.py): by default on a local
instance the tool starts and stops, bound to loopback, or on an existing cluster
(`--address`). A worker is a Ray actor bound to one configuration; it keeps its
compiled engine across tasks (restarted between bags, see pipeline.restart_pipeline),
so compile time is paid once per worker and configuration, not once per bag. The
driver, not Ray, owns retries: a task that raises or whose worker dies is recorded in
error.json and queued again, up to a limit, while the other workers go on. A task is
finished when its marker (task.json) exists; it is written last and atomically, so a
rerun skips exactly the finished tasks. The aggregate report (aggregate.py) is computed
from the per-task report.json files only.
"""
