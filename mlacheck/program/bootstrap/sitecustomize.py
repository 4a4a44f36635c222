"""mlacheck program mode. This folder is on PYTHONPATH only for the processes of one `mlacheck run -- ...`;
Python imports this file at interpreter start. It starts the capture agent (unless mlacheck's .pth, which runs
first, already did), then runs the sitecustomize that it shadows, if there is one further along sys.path. It
reaches an interpreter that has no mlacheck installed: a process whose agent cannot start runs on unobserved, and
says so in the run folder (the report then cannot pass)."""

import os
import sys


def _start_agent():
    try:
        from mlacheck.program.agent import start_from_environment

        start_from_environment()
    except Exception as exc:  # noqa: BLE001 - the program runs on, unobserved
        line = f"pid {os.getpid()} ({sys.executable}): {type(exc).__name__}: {exc}"
        sys.stderr.write(f"mlacheck: capture is off in process {line}\n")
        if type(exc).__name__ != "UntrustedFolder":
            _note(os.environ["MLACHECK_RUN_DIR"], line)


def _note(run_dir, line):
    """The note that says so (mlacheck/program/layout.py names it), in a folder of this user's alone only, never
    through a link."""
    import stat

    try:
        info = os.lstat(run_dir)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(os.path.join(run_dir, f"unobserved-{os.getpid()}.txt"), flags, 0o600)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _run_shadowed_sitecustomize():
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_mlacheck_shadowed_sitecustomize", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if os.environ.get("MLACHECK_RUN_DIR") and not getattr(sys.modules.get("mlacheck_startup"), "_tried", False):
    _start_agent()  # mlacheck's .pth did not run in this interpreter (it would have started it, or said why not)
_run_shadowed_sitecustomize()
