"""The frame worker: one thread, one frame at a time, ticks refused (not queued) while busy."""

from __future__ import annotations

import threading
import time

from oxygen_ros.worker import FrameWorker


class Recorder:
    """A frame function that blocks until released, recording what ran on which thread."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.finished = threading.Semaphore(0)
        self.ran: list[int] = []
        self.threads: set[str] = set()
        self.errors: list[BaseException] = []
        self.exited_on: list[str] = []

    def run(self, tick: int) -> None:
        self.threads.add(threading.current_thread().name)
        self.started.release()
        self.release.acquire()
        try:
            if tick < 0:
                raise ValueError(f"bad tick {tick}")
            self.ran.append(tick)
        finally:
            self.finished.release()

    def complete(self, worker: FrameWorker[int]) -> None:
        """Let the running frame end and wait until the worker takes ticks again."""
        self.release.release()
        assert self.finished.acquire(timeout=10)
        while worker.busy:  # flips right after run() returns
            time.sleep(0.001)

    def worker(self) -> FrameWorker[int]:
        return FrameWorker(
            self.run,
            on_error=self.errors.append,
            on_exit=lambda: self.exited_on.append(threading.current_thread().name),
            name="test-frames",
        )


def test_a_tick_while_a_frame_runs_is_refused_not_queued():
    rec = Recorder()
    worker = rec.worker()
    assert worker.submit(1)
    assert rec.started.acquire(timeout=10)
    assert worker.busy
    assert not worker.submit(2)  # the caller counts an overrun
    rec.release.release()
    assert worker.stop(timeout_s=10)
    assert rec.ran == [1]
    assert rec.threads == {"test-frames"}


def test_frames_run_one_after_another_on_one_thread():
    rec = Recorder()
    worker = rec.worker()
    for tick in range(3):
        assert worker.submit(tick)
        assert rec.started.acquire(timeout=10)
        rec.complete(worker)
    assert worker.stop(timeout_s=10)
    assert rec.ran == [0, 1, 2]
    assert rec.threads == {"test-frames"}


def test_a_failing_frame_is_reported_and_the_loop_goes_on():
    rec = Recorder()
    worker = rec.worker()
    assert worker.submit(-1)
    assert rec.started.acquire(timeout=10)
    rec.complete(worker)
    assert [str(e) for e in rec.errors] == ["bad tick -1"]
    assert worker.submit(7)
    assert rec.started.acquire(timeout=10)
    rec.complete(worker)
    assert worker.stop(timeout_s=10)
    assert rec.ran == [7]


def test_stop_gives_up_on_a_long_frame_which_then_ends_on_its_own_thread():
    rec = Recorder()
    worker = rec.worker()
    assert worker.submit(3)
    assert rec.started.acquire(timeout=10)
    assert worker.stop(timeout_s=0.05) is False  # the frame is still inside run()
    assert not worker.submit(4)  # stopping: nothing new starts
    assert rec.exited_on == []
    rec.release.release()
    assert worker.stop(timeout_s=10) is True
    assert rec.ran == [3]
    assert rec.exited_on == ["test-frames"]  # the engine is reset on its own thread


def test_stop_when_idle_ends_the_thread_and_calls_on_exit_once():
    rec = Recorder()
    worker = rec.worker()
    assert worker.stop(timeout_s=10)
    assert worker.stop(timeout_s=10)
    assert rec.exited_on == ["test-frames"]
    assert rec.ran == []
