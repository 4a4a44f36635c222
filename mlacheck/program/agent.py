"""The agent: capture inside an observed process, started at interpreter start (bootstrap/sitecustomize.py)
or by the pytest plugin.

It installs a family's hooks when the family's module is imported, marks serving start where the rules
(or the program, through `mlacheck.serving_started()` or MLACHECK_SERVING_START) say it starts, writes
this process's own trace, gives a forked child a trace of its own, and never raises into the program.
It imports no rule schema, no torch and no kernel library: the run folder's capture.json says what to do.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

from mlacheck import __version__
from mlacheck.capture.family import FamilyCapture
from mlacheck.capture.spec import CapturePolicy, CaptureSpec, ServingStart
from mlacheck.capture.stack import frame_site
from mlacheck.events import FORMAT_VERSION, JsonlSink
from mlacheck.program.layout import CAPTURE_CONFIG, trace_path

ENV_RUN_DIR = "MLACHECK_RUN_DIR"
ENV_SERVING_START = "MLACHECK_SERVING_START"  # MODULE:QUALNAME, or MODULE:QUALNAME@return

_current: Agent | None = None


class _LoaderWithHook:
    """Runs the module as its own loader would, then calls the hook with it."""

    def __init__(self, loader, hook) -> None:
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._hook(module)


class _PostImportFinder:
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
    """Capture for one process: one trace file in `run_dir`, named by pid."""

    def __init__(self, run_dir: str, config: dict) -> None:
        self.run_dir = run_dir
        self.policy = CapturePolicy(**config.get("policy", {}))
        self.sink = JsonlSink(trace_path(run_dir, os.getpid()))
        self.captures: dict[str, list[FamilyCapture]] = {}
        for data in config["families"]:
            spec = CaptureSpec.from_json(data)
            self.captures.setdefault(spec.module, []).append(FamilyCapture(spec, self.sink, self.policy))
        self.serving_starts = [ServingStart(**data) for data in config.get("serving_starts", [])]
        self.serving_starts += _from_environment(os.environ.get(ENV_SERVING_START, ""))
        self.engines = [(engine["name"], engine["module"]) for engine in config.get("engines", [])]
        watched = set(self.captures) | {start.module for start in self.serving_starts}
        self._finder = _PostImportFinder(watched, self._imported)
        self._pid = os.getpid()
        self._serving = False
        self._forked_from: int | None = None

    def start(self) -> None:
        global _current
        _current = self
        self._write_run_event()
        sys.meta_path.insert(0, self._finder)
        for name in list(self._finder.modules):
            if name in sys.modules:
                self._imported(sys.modules[name])
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.stop)

    def stop(self, how: str = "exit") -> None:
        """Remove the hooks and close the trace with the final counts and an `exit` event."""
        if os.getpid() != self._pid or self._finder not in sys.meta_path:
            return
        sys.meta_path.remove(self._finder)
        self._safely(lambda: self._write_context())
        for captures in self.captures.values():
            for capture in captures:
                self._safely(capture.remove)
        self._safely(lambda: self.sink.write({"type": "exit", "rank": _rank(), "how": how}))
        self.sink.close()

    def serving_started(self, how: str) -> None:
        """Serving starts now in this process (the first mark counts; later ones are ignored)."""
        if self._serving or os.getpid() != self._pid:
            return
        self._serving = True
        self._safely(lambda: self.sink.write({"type": "serving_start", "how": how, "site": _caller_site()}))
        for captures in self.captures.values():
            for capture in captures:
                if capture.installed:
                    self._safely(capture.serving_started)

    def _imported(self, module) -> None:
        for capture in self.captures.get(module.__name__, []):
            self._safely(capture.install)
        for start in self.serving_starts:
            if start.module == module.__name__:
                self._safely(lambda: self._mark_at(module, start))
        if module.__name__ in self.captures:
            self._safely(self._write_context)

    def _mark_at(self, module, start: ServingStart) -> None:
        owner_path, _, attribute = start.qualname.rpartition(".")
        owner = module
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part)
        function = getattr(owner, attribute)
        how = f"{start.module}:{start.qualname} {'returned' if start.at == 'return' else 'called'}"
        agent = self

        def marked(*args, **kwargs):
            if start.at == "call":
                agent.serving_started(how)
            result = function(*args, **kwargs)
            if start.at == "return":
                agent.serving_started(how)
            return result

        marked.__wrapped__ = function
        setattr(owner, attribute, marked)

    def _after_fork(self) -> None:
        if self._finder not in sys.meta_path:  # stopped: a later fork is not observed
            return
        self._forked_from, self._pid = self._pid, os.getpid()

        def child() -> None:
            self.sink.reopen(trace_path(self.run_dir, self._pid))
            self._write_run_event()
            for captures in self.captures.values():
                for capture in captures:
                    if capture.installed:
                        capture.after_fork()
            real_exit = os._exit

            def _exit(code: int) -> None:  # multiprocessing's fork children leave this way, past atexit
                self.stop(how="os._exit")
                real_exit(code)

            os._exit = _exit

        self._safely(child)

    def _write_run_event(self) -> None:
        self.sink.write({
            "type": "run", "format_version": FORMAT_VERSION, "pid": os.getpid(), "ppid": os.getppid(),
            "host": os.uname().nodename, "mlacheck_version": __version__, "started": time.time(),
            "argv": list(sys.argv), "rank": _environment_rank(), "cute_dsl_arch": os.environ.get("CUTE_DSL_ARCH"),
            "forked_from": self._forked_from,
        })

    def _write_context(self) -> None:
        engine = next((name for name, module in self.engines if module in sys.modules), None)
        values = {"target_arch": os.environ.get("CUTE_DSL_ARCH"), "engine": engine}
        self.sink.write({"type": "context", "values": {k: v for k, v in values.items() if v is not None}})

    def _safely(self, action) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - the program goes on whatever capture does
            try:
                self.sink.write({"type": "internal_error", "where": "agent", "message": f"{type(exc).__name__}: {exc}"})
            except Exception:  # noqa: BLE001
                sys.stderr.write(f"mlacheck: capture error in process {os.getpid()}: {exc}\n")


def current() -> Agent | None:
    """The agent of this process, if it is observed."""
    return _current


def _from_environment(value: str) -> list[ServingStart]:
    starts = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        function, _, at = item.partition("@")
        module, _, qualname = function.partition(":")
        if module and qualname:
            starts.append(ServingStart(module, qualname, "return" if at == "return" else "call", "environment"))
    return starts


def _caller_site() -> str | None:
    frame = sys._getframe(1)
    while frame is not None and (frame.f_globals.get("__name__") or "").startswith("mlacheck"):
        frame = frame.f_back
    return frame_site(frame) if frame is not None else None


def _environment_rank() -> int | None:
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _rank() -> int | None:
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_initialized():
            return distributed.get_rank()
    except Exception:  # noqa: BLE001
        pass
    return _environment_rank()


def start_from_environment() -> Agent | None:
    """Start an agent when this process belongs to a program-mode run (MLACHECK_RUN_DIR is set)."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return None
    with open(os.path.join(run_dir, CAPTURE_CONFIG), encoding="utf-8") as file:
        config = json.load(file)
    agent = Agent(run_dir, config)
    agent.start()
    return agent
