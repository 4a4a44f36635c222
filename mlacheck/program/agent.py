"""The agent: capture inside an observed process, started at interpreter start (bootstrap/sitecustomize.py)
or by the pytest plugin. It installs a family's hooks when the family's module is imported, writes this
process's own trace, gives a forked child a trace of its own, and never raises into the program."""

from __future__ import annotations

import atexit
import importlib.abc
import os
import socket
import sys
import time
from pathlib import Path

from mlacheck import __version__
from mlacheck.capture import FamilyCapture
from mlacheck.events import FORMAT_VERSION, JsonlSink
from mlacheck.program.rundir import trace_path
from mlacheck.rules import FamilyRule, load_rules

ENV_RUN_DIR = "MLACHECK_RUN_DIR"
ENV_RULES = "MLACHECK_RULES"
ENV_COMPILE = "MLACHECK_COMPILE"


class _LoaderWithHook(importlib.abc.Loader):
    """Runs the module as its own loader would, then calls the hook with it."""

    def __init__(self, loader, hook) -> None:
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._hook(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds the watched modules through the other finders and wraps their loader with the hook."""

    def __init__(self, modules: set[str], hook) -> None:
        self.modules, self.hook = modules, hook

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderWithHook(spec.loader, self.hook)
                return spec
        return None


class Agent:
    """Capture for one process tree's worth of processes: one trace file per process in `run_dir`."""

    def __init__(self, run_dir: Path, rules: list[FamilyRule], compile_policy: str = "real") -> None:
        self.run_dir = run_dir
        self.sink = JsonlSink(trace_path(run_dir, os.getpid()))
        self.captures: dict[str, list[FamilyCapture]] = {}
        for rule in rules:
            self.captures.setdefault(rule.family.module, []).append(FamilyCapture(rule.family, self.sink, compile_policy))
        self._finder = _PostImportFinder(set(self.captures), self._installed)
        self._pid = os.getpid()

    def start(self) -> None:
        self._write_run_event()
        sys.meta_path.insert(0, self._finder)
        for name in self.captures:
            if name in sys.modules:
                self._installed(sys.modules[name])
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.stop)

    def stop(self) -> None:
        """Remove the hooks and close the trace with an `exit` event (normal interpreter exit only)."""
        if os.getpid() != self._pid or self._finder not in sys.meta_path:
            return
        sys.meta_path.remove(self._finder)
        self._safely(lambda: self.sink.write({"type": "exit", "rank": _distributed_rank() if _distributed_rank() is not None else _environment_rank()}))
        for captures in self.captures.values():
            for capture in captures:
                self._safely(capture.remove)
        self.sink.close()

    def _installed(self, module) -> None:
        for capture in self.captures.get(module.__name__, []):
            self._safely(capture.install)

    def _after_fork(self) -> None:
        if self._finder not in sys.meta_path:  # stopped: a later fork is not observed
            return
        self._pid = os.getpid()
        self._safely(lambda: (self.sink.reopen(trace_path(self.run_dir, self._pid)), self._write_run_event()))

    def _write_run_event(self) -> None:
        self.sink.write({
            "type": "run", "format_version": FORMAT_VERSION, "pid": os.getpid(), "ppid": os.getppid(),
            "host": socket.gethostname(), "mlacheck_version": __version__, "started": time.time(),
            "argv": list(sys.argv), "rank": _environment_rank(), "cute_dsl_arch": os.environ.get("CUTE_DSL_ARCH"),
        })

    def _safely(self, action) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - the program goes on whatever capture does
            try:
                self.sink.write({"type": "internal_error", "where": "agent", "message": f"{type(exc).__name__}: {exc}"})
            except Exception:  # noqa: BLE001
                sys.stderr.write(f"mlacheck: capture error in process {os.getpid()}: {exc}\n")


def _environment_rank() -> int | None:
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _distributed_rank() -> int | None:
    distributed = sys.modules.get("torch.distributed")
    try:
        return distributed.get_rank() if distributed is not None and distributed.is_initialized() else None
    except Exception:  # noqa: BLE001
        return None


def start_from_environment() -> Agent | None:
    """Start an agent when this process belongs to a program-mode run (MLACHECK_RUN_DIR is set)."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return None
    rules = load_rules(Path(os.environ[ENV_RULES]) if os.environ.get(ENV_RULES) else None)
    agent = Agent(Path(run_dir), rules, os.environ.get(ENV_COMPILE, "real"))
    agent.start()
    return agent
