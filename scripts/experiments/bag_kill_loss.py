"""How many messages a SIGKILLed bag writer loses once oxygen-bag recover has run.

    python scripts/experiments/bag_kill_loss.py --kills 8 --flush-s 0.5 [--period-s 0.005]

A writer process (tools.bagio.BagWriter, default split and the given flush) writes a
std_msgs/String every --period-s and prints how many it has written; it is killed with
SIGKILL at a random moment between 1 and 4 s after its first write, the folder is recovered
(tools.bag_recover.recover) and read back with rosbags. The loss is what the writer
reported minus what the bag holds. Prints one JSON object: every kill's loss, min and max.
An experiment harness, not part of the package: it runs from the checkout's venv.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oxygen_ros.tools.bag_recover import recover
from oxygen_ros.tools.bagio import read_bag

WRITER = """
import sys, time
from pathlib import Path
from std_msgs.msg import String
from oxygen_ros.tools.bagio import BagWriter
bag, flush_s, period_s = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
with BagWriter(bag, flush_s=flush_s) as writer:
    i = 0
    while True:
        writer.write_ros("/chatter", i * 1_000_000, String(data=str(i)))
        i += 1
        print(i, flush=True)
        time.sleep(period_s)
"""


def one_kill(bag: Path, flush_s: float, period_s: float, after_s: float) -> int:
    """Messages lost by one writer killed `after_s` into its run."""
    command = [sys.executable, "-c", WRITER, str(bag), str(flush_s), str(period_s)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    written, deadline = 0, None
    for line in child.stdout:  # the clock starts at the first write, after the imports
        written = int(line)
        deadline = deadline or time.monotonic() + after_s
        if time.monotonic() >= deadline:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    written = max([written, *map(int, child.stdout.read().split())])
    recover(bag)
    return written - sum(1 for _ in read_bag(bag))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--flush-s", type=float, default=0.5)
    parser.add_argument("--period-s", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0, help="noise of the kill times")
    args = parser.parse_args()
    when = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        losses = [
            one_kill(Path(tmp) / f"bag{k}", args.flush_s, args.period_s, when.uniform(1.0, 4.0))
            for k in range(args.kills)
        ]
    figures = {"flush_s": args.flush_s, "period_s": args.period_s, "lost": losses}
    print(json.dumps({**figures, "min": min(losses), "max": max(losses)}))


if __name__ == "__main__":
    main()
