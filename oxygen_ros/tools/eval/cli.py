"""Console script `oxygen-eval manifest`: a manifest's (input, configuration) tasks on Ray.

    oxygen-eval manifest MANIFEST.yaml --out DIR [--address ADDR] [--workers N] [--no-reuse]
                [--retries R] [--no-progress]

Everything is checked before Ray starts (the manifest, every bag and sim input against
every configuration it meets, that DIR holds no result of other settings). Finished
tasks are skipped; when none is left no Ray starts at all and only the aggregate report
is written again. Exit status: 0 when every task finished, 1 when some failed
(error.json in their folders), 2 for a manifest or setup error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from oxygen_ros.tools.eval.aggregate import aggregate, collect, write_aggregate
from oxygen_ros.tools.eval.manifest import ManifestError, load_manifest
from oxygen_ros.tools.eval.runner import RunOptions, RunSummary, Scheduler, ray_session
from oxygen_ros.tools.eval.tasks import StaleOutput, is_done


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-eval manifest",
        description="Evaluate bags and sim seeds x configurations on Ray (a local instance by "
        "default).",
    )
    parser.add_argument("manifest", type=Path, help="evaluation manifest (YAML)")
    parser.add_argument("--out", type=Path, required=True, help="output root (resumable)")
    parser.add_argument(
        "--address", help="an existing Ray cluster (e.g. ray://head:10001); default: a local one"
    )
    parser.add_argument("--workers", type=int, default=1, help="concurrent worker actors")
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="a new worker (and engine compile) per task instead of one per configuration",
    )
    parser.add_argument("--retries", type=int, default=2, help="attempts after a failed one")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.workers < 1 or args.retries < 0:
        parser.error("--workers must be >= 1 and --retries >= 0")
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # configurations load here too
    try:
        manifest = load_manifest(args.manifest)
        tasks = manifest.tasks()
        todo = [t for t in tasks if not is_done(args.out, t)]
    except (ManifestError, StaleOutput) as error:
        print(f"oxygen-eval manifest: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    summary = RunSummary(tasks=len(tasks), finished_before=len(tasks) - len(todo))
    if todo:
        opts = RunOptions(args.workers, not args.no_reuse, args.retries, not args.no_progress)
        configs = list({t.config.name: t.config for t in todo}.values())
        try:
            with ray_session(args.address, configs, args.workers):
                summary = Scheduler(todo, args.out.resolve(), opts, len(tasks)).run()
        except RuntimeError as error:  # the cluster cannot hold a task
            print(f"oxygen-eval manifest: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                f"oxygen-eval manifest: interrupted; rerun to resume into {args.out}",
                file=sys.stderr,
            )
            return 130
        (args.out / "run.json").write_text(json.dumps(summary.as_dict(), indent=1))
    paths = write_aggregate(aggregate(collect(args.out, tasks)), args.out)
    print(_summary_line(summary, args.out, paths["md"]))
    return 1 if summary.failed else 0


def _summary_line(summary: RunSummary, out: Path, report: Path) -> str:
    failed = "".join(
        f"failed: {task} (see {out / task / 'error.json'})\n" for task in summary.failed
    )
    return failed + (
        f"{summary.finished} tasks run, {summary.finished_before} finished before, "
        f"{len(summary.failed)} failed, {summary.retried} retried; {summary.elapsed_s:.1f} s "
        f"({summary.tasks_per_min:.1f} tasks/min), {summary.engines_built} engines built\n"
        f"report: {report}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
