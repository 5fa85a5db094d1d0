"""Check an `oxygen-bag to-lerobot` export with LeRobot's own reader (LeRobotDataset).

LeRobot's reader needs torch and a video decoder that the project's .venv does not carry,
so it runs from a scratch venv outside the repository; the export's source (what the bag
holds, frame by frame) is read by the repository's .venv (rclpy, rosbags) in a child
process of this script (`--dump`), with the exporter's own frame plan.

    python3.11 -m venv /tmp/lerobot_venv
    /tmp/lerobot_venv/bin/pip install lerobot-dataset==0.4.4 \
        torch==2.14.1 torchvision==0.29.1 torchcodec==0.17.0
    apt-get install libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 \
        libavdevice59 libavfilter8            # the FFmpeg torchcodec decodes with
    .venv/bin/oxygen-bag to-lerobot data/sim_bag --out /tmp/sim_lerobot
    /tmp/lerobot_venv/bin/python scripts/check_lerobot_export.py /tmp/sim_lerobot \
        data/sim_bag --params config/sim.yaml

It asserts the same frame and episode counts, the same features, state and action
exactly, tasks and indices, action chunks read through delta_timestamps (as a policy
trains on them), and images within the video codec's error, which it prints (the largest
and the mean absolute pixel difference, 0..255, per camera). Exit 0: all held.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# |pixel difference| accepted from H.264 at the export's default CRF (10): at most, mean
MAX_PIXEL_ERROR, MEAN_PIXEL_ERROR = 64, 2.0
HORIZON = 4  # action chunk rows read back through delta_timestamps


def dump(bags: list[Path], params: Path, fps: int | None, out: Path) -> None:
    """Run in the repository's .venv: the source of every frame, planned as the export does."""
    from oxygen_ros.tools import lerobot_export as lx

    src = lx.sources(params)
    arrays: dict[str, list[np.ndarray]] = {"state": [], "action": [], "episode": []}
    images: dict[str, list[np.ndarray]] = {key: [] for key in src.keys}
    tasks: list[str] = []
    number = 0
    for bag in bags:
        episodes, fps = lx.plan_bag(bag, src, lx.check_topics(bag, src, None), fps)
        if not episodes:
            continue
        ordinals = np.concatenate([e.images for e in episodes])
        for k, (camera, key) in enumerate(zip(src.cameras, src.keys, strict=True)):
            images[key] += list(lx.camera_frames(bag, camera, ordinals[:, k]))
        for episode in episodes:
            arrays["state"].append(episode.state)
            arrays["action"].append(episode.action)
            arrays["episode"].append(np.full(len(episode.state), number))
            tasks += [episode.task] * len(episode.state)
            number += 1
    np.savez(
        out,
        fps=fps,
        state=np.concatenate(arrays["state"]),
        action=np.concatenate(arrays["action"]),
        episode=np.concatenate(arrays["episode"]),
        tasks=np.asarray(tasks),
        state_names=np.asarray(src.state_names),
        action_names=np.asarray(src.action_names),
        **{f"image:{key}": np.stack(frames) for key, frames in images.items()},
    )


def check(dataset: Path, source: dict[str, np.ndarray]) -> list[str]:
    """Load `dataset` with LeRobot's LeRobotDataset (local root, no hub) and compare."""
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("oxygen/check", root=dataset)  # root: local files only, no Hub
    keys = [k.removeprefix("image:") for k in source if k.startswith("image:")]
    frames, episodes = len(source["state"]), len(set(source["episode"].tolist()))
    assert len(ds) == frames, f"LeRobot reads {len(ds)} frames, the source has {frames}"
    assert ds.num_episodes == episodes, f"{ds.num_episodes} episodes, source {episodes}"
    assert ds.fps == int(source["fps"]), (ds.fps, source["fps"])
    expected = {
        "observation.state": ("float32", (source["state"].shape[1],), source["state_names"]),
        "action": ("float32", (source["action"].shape[1],), source["action_names"]),
        **{k: ("video", source[f"image:{k}"].shape[1:], None) for k in keys},
        **{k: ("int64", (1,), None) for k in ("frame_index", "episode_index", "index")},
        "task_index": ("int64", (1,), None),
        "timestamp": ("float32", (1,), None),
    }
    assert set(ds.features) == set(expected), (sorted(ds.features), sorted(expected))
    for key, (dtype, shape, names) in expected.items():
        feature = ds.features[key]
        assert feature["dtype"] == dtype and tuple(feature["shape"]) == tuple(shape), feature
        if names is not None:
            assert list(feature["names"]) == names.tolist(), (key, feature["names"])
    worst, total = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0.0)
    starts = np.flatnonzero(np.diff(source["episode"], prepend=-1))
    for i in range(len(ds)):
        item = ds[i]
        assert np.array_equal(item["observation.state"].numpy(), source["state"][i]), i
        assert np.array_equal(item["action"].numpy(), source["action"][i]), i
        assert item["episode_index"].item() == source["episode"][i], i
        assert item["index"].item() == i, i
        frame = i - starts[source["episode"][i]]
        assert item["frame_index"].item() == frame, i
        assert abs(item["timestamp"].item() - frame / ds.fps) < 1e-4, i
        assert item["task"] == source["tasks"][i], (i, item["task"], source["tasks"][i])
        for key in keys:
            decoded = np.round(item[key].numpy().transpose(1, 2, 0) * 255).astype(np.int16)
            error = np.abs(decoded - source[f"image:{key}"][i])
            worst[key] = max(worst[key], int(error.max()))
            total[key] += float(error.mean()) / len(ds)
    assert all(e <= MAX_PIXEL_ERROR for e in worst.values()), worst
    assert all(e <= MEAN_PIXEL_ERROR for e in total.values()), total
    # as policies train on it: action chunks by delta_timestamps, padded past an episode
    chunks = LeRobotDataset(
        "oxygen/check", root=dataset, delta_timestamps={"action": list(np.arange(HORIZON) / ds.fps)}
    )
    ends = np.append(starts[1:], frames)[source["episode"]]  # each frame's episode end
    for i in range(len(chunks)):
        item = chunks[i]
        rows = np.arange(i, i + HORIZON)
        want = source["action"][np.minimum(rows, ends[i] - 1)]
        assert np.array_equal(item["action"].numpy(), want), i
        assert np.array_equal(item["action_is_pad"].numpy(), rows >= ends[i]), i
    return [
        f"LeRobotDataset({dataset}): {len(ds)} frames, {ds.num_episodes} episodes, "
        f"{ds.fps} fps, features {sorted(ds.features)}: match the source",
        "state and action: equal in every frame; tasks, indices and timestamps: equal",
        f"action chunks of {HORIZON} (delta_timestamps): equal, padded past episode ends",
        *(
            f"{k}: abs pixel error (of 255) over {len(ds)} frames: max {worst[k]}, "
            f"mean {total[k]:.3f}"
            for k in keys
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("bags", nargs="+", type=Path)
    parser.add_argument("--params", type=Path, default=ROOT / "config/sim.yaml")
    parser.add_argument("--fps", type=int)
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump is not None:
        dump(args.bags, args.params, args.fps, args.dump)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        npz = Path(folder) / "source.npz"
        command = [str(ROOT / ".venv/bin/python"), __file__, str(args.dataset)]
        command += [*map(str, args.bags), "--params", str(args.params), "--dump", str(npz)]
        command += ["--fps", str(args.fps)] if args.fps else []
        subprocess.run(command, check=True, cwd=ROOT)
        with np.load(npz) as data:
            source = dict(data)
    for line in check(args.dataset, source):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
