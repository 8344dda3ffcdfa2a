"""Parent death: the processes of a stack stop when the process that started it dies, even by SIGKILL.

    python -m services.cluster.watchdog STATE    (stdin: the read end of the starter's lifeline)

Stack.hold starts it in a session of its own with the read end of a pipe whose write end only the
starting process holds. The kernel closes that end however the process ends, so end of file means
the starter is gone: the watchdog then stops every process of the stack in STATE (their process
groups, so their own children too). A byte before the end (Stack.release) means the stack was
stopped or let go: the watchdog exits and stops nothing. PR_SET_PDEATHSIG would reach only each
direct child, and would fire when the starter's thread ends rather than the process.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .stack import Stack


def main(argv: list[str] | None = None) -> None:
    (state,) = argv if argv is not None else sys.argv[1:]
    try:
        released = os.read(0, 1)
    except OSError:
        released = b""
    if not released:
        Stack.from_state(Path(state), detach=True).stop(quiet=True)  # its recorded ports: etcd's leader asked


if __name__ == "__main__":
    main()
