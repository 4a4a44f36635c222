"""`python -m mlacheck.program.watch ROOT_PID RUN_DIR`: the process tree of a `pytest --mlacheck` session, recorded
from a process of its own (a thread in pytest would make every fork a test makes warn) until its standard input
closes; then the run folder's processes.json. It prints "ready" once its own interpreter has started: the session
registers after that, so that nothing of mlacheck observes the watcher itself. A session that ends as it should
writes "done" first; where the input closes without it (pytest was killed), the watcher also ends the processes of
the session still running (guard.py), so that none runs on."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path

from mlacheck.program.guard import end
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.tree import ProcessTree


def main() -> None:
    root, run_dir = int(sys.argv[1]), Path(sys.argv[2])
    tree = ProcessTree(root, exclude=frozenset({os.getpid()}))
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], tree.interval)[0]:
        tree.poll()
    done = sys.stdin.readline().strip() == "done"
    tree.poll()
    if not done:  # every process recorded that is still the one recorded (orphans are no longer pytest's descendants)
        end(set(tree.seen))
    RunFolder(run_dir).write_tree({"host": os.uname().nodename, "root": root, "processes": tree.records()})


if __name__ == "__main__":
    main()
