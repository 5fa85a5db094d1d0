"""Child processes that end with the process that started them (Linux).

The tools start the oxygen node, the simulator and the Foxglove bridge as child processes
and stop them when they finish. A parent that never gets there (SIGKILLed, as an
oxygen-eval worker can be; a crash; a Ctrl-C that interrupts the clean-up) used to leave
its children spinning forever, holding CPU, memory and their DDS topics.

`popen` therefore asks the kernel, in the child between fork and exec, to send it SIGTERM
when its parent dies (`prctl(PR_SET_PDEATHSIG)`); the nodes stop cleanly on SIGTERM
(oxygen_ros.spin). This is Linux only: elsewhere the children are started as plain
Popen children and are not stopped with the parent. Two properties of PR_SET_PDEATHSIG
matter:

- the signal comes when the *thread* that started the child ends, not the process: start
  children from a thread that lives as long as they should (the tools use the main
  thread, and oxygen-eval runs a task on its worker's main thread);
- a parent that dies before the child has made the call would be missed, so the child
  checks that its parent is still the one that forked it, and ends itself otherwise.

The code run in the child only calls a libc function looked up beforehand, in the
parent: between fork and exec a child of a threaded process may not take locks (no
imports, no allocation-heavy work).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(command, **kwargs) for a child that gets SIGTERM when this thread
    ends (Linux; a plain Popen elsewhere)."""
    if _prctl is not None:
        kwargs["preexec_fn"] = _die_with(os.getpid())
    return subprocess.Popen(list(command), **kwargs)


def _die_with(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child, between fork and exec
        if _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:  # Popen raises it
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(126)

    return preexec
