"""Running one rclpy node as a process: init, our own signal handling, spin, clean up.

The console scripts that host a node (`oxygen-node`, `oxygen-sim`, `oxygen-config foxglove`)
start and stop the same way, through `run_node`:

1. SIGINT and SIGTERM get our handler before `rclpy.init`, which is told to install none
   (`SignalHandlerOptions.NO`). rclpy's own SIGTERM handler shuts the context down from
   its signal thread: arriving while the node was being built or configured (the JAX
   compile takes seconds), that let configure run on to fail against the dead context,
   or, when it raced the start of `spin()`, left the node spinning forever. `ros2 launch`
   and systemd stop a node with SIGTERM, so that must be prompt and clean.
2. The handler never raises: it records the first signal, and the second sends the
   node's hold at once (`Hosted.hold`, on a thread of its own: the handler runs wherever
   the main thread was, maybe inside a lock the hold takes); later ones are ignored.
   Under `ros2 launch` in a terminal Ctrl-C arrives twice (from the terminal to the
   group, then from launch); an exception from a signal lands wherever the main thread
   is, in the middle of releasing the engine, in JAX's exit handler, or in a gc callback
   where Python only prints it and goes on (the stop is lost).
3. The node is built by a callable (quick: parameters are declared), then started
   (`Hosted.start`, e.g. autostart, which configures and compiles every shape) on a
   thread while the main thread watches for a stop. A stop during the start ends the
   process at once (`_abandon`); otherwise the executor spins while the context is
   valid, until a stop, an external shutdown or `Hosted.done()`.
4. The spin loop waits in rcl at most `_POLL_S`, so a stop ends it between two
   callbacks: a Python signal handler runs only when the main thread is back in Python,
   and a node without timers would otherwise wait in rcl forever. Clean-up then closes
   what the node holds, destroys it and shuts rclpy down, with the handler still in place
   (a second signal then still holds); after it the signals are ignored.

A start that cannot succeed (`CannotStart`, or an rcl error such as an SROS2 enclave that
is not there) ends in one line on stderr and a non-zero status, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from oxygen_ros import ros_args

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_POLL_S = 0.05  # longest wait in rcl between two checks for a stop or `done`


class CannotStart(Exception):
    """The node cannot be built: `run_node` prints the message and returns `status`."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Hosted:
    """A built node and the hooks around its spin (all optional but the node)."""

    node: Node
    start: Callable[[], None] = lambda: None  # after the executor has the node, before spin
    done: Callable[[], bool] | None = None  # spin until this is true (None: until stopped)
    close: Callable[[], None] = lambda: None  # before the node is destroyed
    hold: Callable[[], object] = lambda: None  # on a second stop signal, on its own thread


class StopRequest:
    """SIGINT and SIGTERM: the first is recorded, the second runs `on_repeat` on a thread
    of its own, the later ones are ignored."""

    def __init__(self, on_repeat: Callable[[], object] = lambda: None) -> None:
        self.signal: signal.Signals | None = None  # the first stop signal
        self.on_repeat = on_repeat
        self._repeated = False

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)

    def ignore(self) -> None:
        """Ignore the signals from now on (the process is ending)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum)
        elif not self._repeated:
            self._repeated = True
            threading.Thread(target=self.on_repeat, name="oxygen-hold", daemon=True).start()


def cannot_start(error: Exception) -> str:
    """One line for an rcl error at start-up, naming security when it was asked for.

    With ROS_SECURITY_ENABLE=true rcl needs the enclave's keystore files and a DDS built
    with the security plugins (the Fast DDS wheels on PyPI have none); either failing is
    an rcl error spread over several lines.
    """
    reason = " ".join(str(error).split())
    if os.environ.get("ROS_SECURITY_ENABLE", "").lower() != "true":
        return f"cannot start ROS 2: {reason}"
    strategy = os.environ.get("ROS_SECURITY_STRATEGY", "Permissive")
    if not os.environ.get("ROS_SECURITY_KEYSTORE"):
        reason += " (ROS_SECURITY_KEYSTORE is not set)"
    return (
        f"ROS 2 security is requested (ROS_SECURITY_ENABLE=true, ROS_SECURITY_STRATEGY="
        f"{strategy}) but cannot be set up: {reason}. Create the node's enclave (README, "
        "Access control) on a ROS 2 whose DDS has security plugins, or unset "
        "ROS_SECURITY_ENABLE"
    )


def run_node(prog: str, build: Callable[[], Hosted], args: Sequence[str] | None = None) -> int:
    """Init rclpy (`args`: a full argv, default sys.argv), build, start and spin the node
    until a stop or `done`, then clean up. 0 after a stop (also one during the start,
    which ends the process: `_abandon`), CannotStart's status, or 1 when rcl cannot start."""
    stop = StopRequest()
    stop.install()
    hosted: Hosted | None = None
    status = 0
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        hosted = build()
        _check_overrides(hosted.node, sys.argv if args is None else args)
        stop.on_repeat = hosted.hold
        executor = SingleThreadedExecutor()
        executor.add_node(hosted.node)
        if _started(hosted.start, stop):
            _spin(executor, hosted.done, stop)
    except ExternalShutdownException:
        pass
    except CannotStart as error:
        status = _fail(prog, str(error), error.status)
    except _rclpy.RCLError as error:  # e.g. an SROS2 enclave or DDS plugin that is missing
        status = _fail(prog, cannot_start(error), 1)
    finally:
        if hosted is not None:  # a signal now only holds: clean-up is never cut short
            hosted.close()
            hosted.node.destroy_node()
        rclpy.try_shutdown()
        stop.ignore()  # the process is ending
    return status


def _check_overrides(node: Node, args: Sequence[str]) -> None:
    """CannotStart (status 2, as a mistyped value rclpy refuses) for a `-p` that rcl
    dropped without a word (ros_args.unapplied): the node must not run on a value its
    operator thinks they replaced."""
    cli = ros_args.cli_parameters(args, node.get_name())
    values = {n: node.get_parameter(n).value for n in cli if node.has_parameter(n)}
    lines = ros_args.unapplied(cli, values)
    if lines:
        raise CannotStart("bad parameter: " + "; ".join(lines), status=2)


def _started(start: Callable[[], None], stop: StopRequest) -> bool:
    """Run `start` on a thread while watching for a stop; whether to spin. A stop while
    it runs ends the process; what `start` raises is raised here."""
    if stop.signal is not None:
        return False
    failed: list[BaseException] = []

    def run() -> None:
        try:
            start()
        except BaseException as error:  # handed to the main thread
            failed.append(error)

    thread = threading.Thread(target=run, name="oxygen-start", daemon=True)
    thread.start()
    while thread.is_alive():
        if stop.signal is not None:
            _abandon()
        thread.join(_POLL_S)
    if failed:
        raise failed[0]
    return stop.signal is None


def _abandon() -> NoReturn:
    """End the process now, with the start still running, and status 0 (a stop).

    The start thread is inside the node, typically configuring it while XLA compiles on
    its own thread pool. Releasing the node under it would race it, and interpreter
    finalization runs JAX's exit handler, which destroys the backend under the running
    compile: a segfault (status 139) for about a third of the SIGTERMs sent during
    configure, when an earlier version stopped the start with an exception. So nothing is
    released: the OS frees the memory, and DDS peers drop the node when its lease ends.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spin(
    executor: SingleThreadedExecutor, done: Callable[[], bool] | None, stop: StopRequest
) -> None:
    """Spin while the context is valid (a shutdown during start-up ends here at once)."""
    context = executor.context
    while context.ok() and stop.signal is None and not (done is not None and done()):
        executor.spin_once(timeout_sec=_POLL_S)


def _fail(prog: str, message: str, status: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return status
