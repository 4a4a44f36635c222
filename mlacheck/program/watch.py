"""`python -m mlacheck.program.watch ROOT_PID RUN_DIR READY_FD`: the process tree of a `pytest --mlacheck` session,
recorded from a process of its own (a thread in pytest would make every fork a test makes warn) until its standard
input closes; then the run folder's processes.json. It writes "ready" on READY_FD (a pipe of its own: what its
interpreter prints on stdout, a sitecustomize's banner, is no handshake) once its own interpreter has started: the
session registers after that, so that nothing of mlacheck observes the watcher itself.

A session that ends as it should writes "done" first: the processes of the session still running then (a server a
test left running) are given a moment to end by themselves, then SIGTERM, a grace period and SIGKILL, as `mlacheck
run` ends what its program left (supervisor.end_remnants); processes.json names each one it ended (`ended_by`).
Where the input closes without "done" (pytest was killed, or exited in a test), the watcher also ends the processes
of the session still running (guard.py), so that none runs on."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path

from mlacheck.program.guard import end
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.supervisor import GRACE_SECONDS, end_remnants
from mlacheck.program.tree import ProcessTree


def main() -> None:
    root, run_dir, ready = int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    tree = ProcessTree(root, exclude=frozenset({os.getpid()}))
    os.write(ready, b"ready\n")
    os.close(ready)
    while not select.select([sys.stdin], [], [], tree.interval)[0]:
        tree.poll()
    done = sys.stdin.readline().strip() == "done"
    tree.poll()
    if done:
        end_remnants(None, GRACE_SECONDS, tree, subreaper=False)
    else:  # every process recorded that is still the one recorded (orphans are no longer pytest's descendants)
        end(set(tree.seen))
    RunFolder(run_dir).write_tree({"host": os.uname().nodename, "root": root, "processes": tree.records()})


if __name__ == "__main__":
    main()
