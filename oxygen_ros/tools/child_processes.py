"""Child processes that end with the process that started them (Linux).

The tools start the oxygen node, the simulator and the Foxglove bridge as child processes
and stop them when they finish. A parent that never gets there (SIGKILLed, as an
oxygen-eval manifest worker can be; a crash; a Ctrl-C that interrupts the clean-up) used to leave
its children spinning forever, holding CPU, memory and their DDS topics.

`popen` therefore has the kernel send the child SIGTERM when its parent dies
(`prctl(PR_SET_PDEATHSIG)`); the nodes stop cleanly on SIGTERM (oxygen_ros.spin). The
call has to be made in the child, so the child starts as this module
(`python -m oxygen_ros.tools.child_processes PARENT_PID COMMAND...`), which makes it and then
replaces itself with COMMAND (exec keeps the setting; Popen's pid is COMMAND's). Not a
`preexec_fn`: that runs Python in a forked copy of a parent full of threads (JAX, rclpy),
which Python documents as unsafe and JAX warns about on every start.

This is Linux only: elsewhere `popen` is a plain Popen and the children outlive a parent
that dies. Two properties of PR_SET_PDEATHSIG matter:

- the signal comes when the *thread* that started the child ends, not the process: start
  children from a thread that lives as long as they should (the tools use the main
  thread, and oxygen-eval manifest runs a task on its worker's main thread);
- a parent that died before the call would be missed, so the child checks that its
  parent is still PARENT_PID, and ends at once otherwise.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_LINUX = sys.platform.startswith("linux")


def popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(command, **kwargs) for a child that gets SIGTERM when this thread
    ends (Linux; a plain Popen elsewhere). command[0] is looked up on PATH."""
    if _LINUX:
        command = [sys.executable, "-m", __name__, str(os.getpid()), *command]
    return subprocess.Popen(list(command), **kwargs)


def main(argv: Sequence[str]) -> NoReturn:
    """In the child: SIGTERM when the parent dies, then become the command."""
    parent, *command = argv
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        print(f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}", file=sys.stderr)
        os._exit(126)
    if os.getppid() != int(parent):  # it died before the call above
        os._exit(0)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
