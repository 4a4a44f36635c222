"""The agent: capture inside an observed process, started at interpreter start (by mlacheck-startup.pth through
autostart.py, or by bootstrap/sitecustomize.py on PYTHONPATH, whichever comes first) or by the pytest plugin.

It installs a family's hooks when the family's module is imported (and a watcher, a capture that finds its families
at run time, such as every Triton kernel, when the module it watches is), tells them where the engine's warm-up and
capture functions (`[[phase]]` in the rules) start and end, marks serving start where the rules (or the program,
through `mlacheck.serving_started()` or MLACHECK_SERVING_START) say it starts, writes this process's own trace, gives
a forked child a trace of its own, and never raises into the program. It imports no rule schema, no torch and no
kernel library: the run folder's capture.json says what to do; the capture code itself is imported when a watched
family's module is, so that start-up stays cheap."""

from __future__ import annotations

import functools
import os
import signal
import sys

from mlacheck import qualnames, schemas
from mlacheck.capture import installed
from mlacheck.errors import MlacheckError
from mlacheck.events import (
    context_event,
    exec_event,
    exit_event,
    internal_error_event,
    run_event,
    serving_start_event,
    start_run_clock,
    unseen_event,
)
from mlacheck.files import read_json
from mlacheck.program import ending, exits, found, reaps, spawns
from mlacheck.program.layout import CAPTURE_CONFIG, ENV_RUN_DIR, installed_path, trace_path
from mlacheck.program.post_import import PostImportFinder
from mlacheck.program.trust import allowed_environment, check_folder, own_watcher
from mlacheck.sinks import JsonlSink, write_internal_error

ENV_SERVING_START = "MLACHECK_SERVING_START"  # MODULE:QUALNAME, or MODULE:QUALNAME@return

_current: Agent | None = None


class Agent:
    """Capture for one process: one trace file in `run_dir`, named by pid."""

    def __init__(self, run_dir: str, config: dict, found_by: str = "environment") -> None:
        self.run_dir = run_dir
        self.config = config
        self.found_by = found_by  # how this process found its run: "environment", "registry" or "plugin"
        # a process on another host than the run's (a folder shared between nodes) names its trace by host too
        self._host = None if config.get("host") in (None, os.uname().nodename) else os.uname().nodename
        self.sink = JsonlSink(trace_path(run_dir, os.getpid(), self._host))
        installed.share(functools.partial(installed_path, run_dir))  # the processes of the run ask the metadata once
        self.captures: dict[str, list] = {}  # module -> its families' FamilyCapture, made when the module is imported
        self._compilers: list | None = None  # the `[[compiler_process]]` entries, read at the first process started
        self.families: dict[str, list[dict]] = {}  # module -> its rule files, as the schema dumped them
        for data in config["families"]:
            self.families.setdefault(data["family"]["module"], []).append(data)
        self.watchers = {watcher["module"]: watcher for watcher in config.get("watchers", [])}
        starts = config.get("serving_starts", []) + _from_environment(os.environ.get(ENV_SERVING_START, ""))
        self.serving_starts = [(*qualnames.split(start["function"]), start.get("at", "call")) for start in starts]
        self.frames = [qualnames.split(phase["function"]) for phase in config.get("phases", [])]
        self.steps = [qualnames.split(step["function"]) for step in config.get("steps", [])]
        self.engines = [(engine["name"], engine["module"]) for engine in config.get("engines", [])]
        self.arch_env = list(config.get("arch_env", []))
        self.nets: dict[str, list[dict]] = {}  # module -> the compile nets whose entry point it holds
        for data in config.get("compile_nets", []):
            self.nets.setdefault(qualnames.split(data["function"])[0], []).append(data)
        self.entries: dict[str, list[dict]] = {}  # module -> the families with a --dry entry function in it
        if config.get("policy", {}).get("dry"):
            for data in config["families"]:
                for entry in data["dry"]["entries"]:
                    self.entries.setdefault(qualnames.split(entry)[0], []).append(data)
        self._patches = None  # the engine functions wrapped (capture.install.Patches), made at the first one
        watched = set(self.families) | set(self.nets) | set(self.entries) | set(self.watchers)
        watched |= {module for module, *_ in self.serving_starts + self.frames + self.steps}
        self._finder = PostImportFinder(watched, self._imported, found.hook(self))
        self._pid = os.getpid()
        self._serving = False
        self._forked_from: int | None = None
        self._execing = False
        self._exits = exits.ExitFunctions(self._at_exit, self._observing, self._safely)

    def start(self) -> None:
        global _current
        _current = self
        self._begin()
        os.register_at_fork(after_in_child=self._after_fork)
        ending.watch(self.sink)
        exits.chain_signals(self._on_signal)
        exits.hook_exec(self._exec_hook)
        self._exits.install()
        spawns.hook(lambda make: self._safely(lambda: self._started(make())), self._observing)
        spawns.hook_system(self._shell_started, self._observing)
        reaps.hook(lambda event: self._safely(lambda: self.sink.write(event)), self._observing)

    def _begin(self) -> None:
        """Start this image's trace with its run event, and install what the modules already imported need."""
        self._write_run_event()
        self._serving_kept("before an exec that failed")
        sys.meta_path.insert(0, self._finder)
        for name in list(self._finder.modules):
            if name in sys.modules:
                self._imported(sys.modules[name])
        found.start(self)  # the Tritons no rule lists, found by their layout

    def stop(self, how: str = "exit") -> None:
        """Remove the hooks and close the trace with the final counts and an `exit` event."""
        if os.getpid() != self._pid or self._finder not in sys.meta_path:
            return
        sys.meta_path.remove(self._finder)
        self._safely(lambda: self._write_context())
        self._safely(self._copies)  # (copies not netted are named as the captures are removed)
        self._safely(lambda: found.rescan(self, "at exit"))
        for captures in self.captures.values():
            for capture in captures:
                self._safely(capture.remove)
        if self._patches is not None:
            self._patches.undo(lambda where, action: self._safely(action))
        self._safely(lambda: self.sink.write(exit_event(spawns.process_rank(), how)))
        self.sink.close()
        self._patches = None
        self.captures = {}  # let go: exec and fork hooks keep the agent; what captures hold would outlive teardown

    def _at_exit(self) -> None:
        """atexit's call: at the interpreter's exit, `stop`. A program may run its atexit functions itself and go on
        (`atexit._run_exitfuncs()`: test fixtures after each test, restart helpers before an exec): then capture stays
        on, the counts are kept (a checkpoint, as a flush keeps them) and no exit event is written (the process has not
        ended: a later kill is no crash in its teardown); the wrapper of `_run_exitfuncs` registers this again once
        the program's functions have run (atexit forgets every function registered while it runs them), so that the
        real exit still stops capture. A call that came past that wrapper (the program holds atexit's own function)
        cannot be registered again: what the exit would have written may be lost, an `unseen` line says so."""
        if not self._observing():
            return
        if exits.exiting(sys._getframe(0)):
            self.stop()
            return
        self._safely(lambda: self._write_context())
        self._safely(lambda: found.rescan(self, "when the program ran its atexit functions"))
        for capture in self._all_captures():
            if hasattr(capture, "flush"):
                self._safely(capture.flush)
        if not self._exits.running:
            self._safely(lambda: self.sink.write(unseen_event("atexit", exits.UNREGISTERED.format(pid=os.getpid()))))

    def _on_signal(self, signum: int, frame: object) -> None:
        """A default-action SIGTERM, SIGHUP or SIGINT: capture stopped first (counts, the capture's exit checks, the exit
        event), then the process ends by it as it would have."""
        self.stop(how=signal.Signals(signum).name)
        exits.end_by_default(signum)

    def _observing(self) -> bool:
        """Whether this process's capture runs (not stopped, and this process's: not a fork's copy of a stopped one)."""
        return self._finder in sys.meta_path and os.getpid() == self._pid

    def _exec_hook(self, name: str, real):
        """os.exec* first say where the process goes (an `exec` event) and stop capture as at exit (the new image: a new
        process to observe, in the same trace). A failed exec starts capture again; the outermost call alone writes."""
        agent = self

        @functools.wraps(real)
        def exec_hooked(*args, **kwargs):
            if agent._execing or not agent._observing():
                return real(*args, **kwargs)
            agent._execing = True
            try:
                agent._safely(lambda: agent._before_exec(name, args))
                return real(*args, **kwargs)
            except BaseException as exc:
                agent._safely(functools.partial(agent._exec_failed, exc))
                raise
            finally:
                agent._execing = False

        exec_hooked._mlacheck_exec = True
        return exec_hooked

    def _before_exec(self, name: str, args: tuple) -> None:
        path = os.fsdecode(args[0])
        argv = (
            args[1] if name in ("execv", "execve", "execvp", "execvpe") else args[1 : -1 if name[-1] == "e" else None]
        )
        self._started(exec_event(path, spawns.as_text(argv), spawns.runs_python(path)))
        self.stop(how="exec")

    def _started(self, event: dict) -> None:
        """A process started (`spawn`, or this image's `exec`): written; one of a compiler is an unwatched compile."""
        self.sink.write(event)
        if not event["python"]:
            self._compiler_started(event)

    def _shell_started(self, path: str, argv: list[str]) -> None:
        """os.system's shell starts (`sh -c LINE`; no spawn event: its pid is never known)."""
        self._safely(lambda: self._compiler_started({"path": path, "argv": argv}))

    def _compiler_started(self, event: dict) -> None:
        """A non-Python process started (`event`; os.system's shell has none written): a compiler's is an unwatched
        compile."""
        if self.config.get("compiler_processes"):
            from mlacheck.capture.compiler_processes import entries_of, started
            from mlacheck.program.shells import shell_commands

            if self._compilers is None:
                self._compilers = entries_of(self.config["compiler_processes"])
            started(event, self._compilers, self.sink, lambda: self._plain_config()[1], self._serving, shell_commands)

    def _exec_failed(self, error: BaseException) -> None:
        """The exec did not happen: say so, and observe this image again (a new image in the trace)."""
        if self._finder in sys.meta_path:
            return
        self.sink.reopen(trace_path(self.run_dir, self._pid, self._host))
        self.sink.write(exec_event(failed=f"{type(error).__name__}: {error}"))
        self.captures = {}
        self._begin()

    def serving_started(self, how: str) -> None:
        """Serving starts now in this process (the first mark counts; later ones are ignored)."""
        if self._serving or os.getpid() != self._pid:
            return
        self._safely(lambda: found.rescan(self))  # (before serving start: what it compiled was warm-up)
        self._serving = True
        self._safely(lambda: self.sink.write(serving_start_event(how, _caller_site())))
        self._safely(self._copies)
        for capture in self._all_captures():
            self._safely(capture.serving_started)

    def _imported(self, module) -> None:
        name = module.__name__
        if (name in self.families or name in self.nets or name in self.entries) and name not in self.captures:
            self.captures[name] = []
            self._safely(lambda: self._install(module))
        elif name in self.captures:  # the module ran again (reloaded, imported again): its families follow it
            for capture in self.captures[name]:
                if hasattr(capture, "follow"):
                    self._safely(capture.follow)
        if name in self.watchers and name not in self.captures:
            self._safely(lambda: self._watch(name))
        for module_name, qualname, at in self.serving_starts:
            if module_name == name:
                how = f"{name}:{qualname} {'returned' if at == 'return' else 'called'}"
                self._safely(
                    functools.partial(self._wrap, module, qualname, functools.partial(self.serving_started, how), at)
                )
        for module_name, qualname in self.frames:  # a script's own (__main__) functions are not defined yet: the stack
            if module_name == name != "__main__":
                self._safely(functools.partial(self._wrap, module, qualname, self._phase_changed, "both"))
        for module_name, qualname in self.steps:  # a script's own (__main__) functions cannot be timed
            if module_name == name != "__main__":
                self._safely(functools.partial(self._time_steps, module, qualname))
        if name in self.captures:
            self._safely(self._write_context)

    def _install(self, module) -> None:
        """The captures of a watched module: its families' (or its unwatched layouts), its compile nets, and under
        --dry the families' entry functions it holds."""
        from mlacheck.capture import watch
        from mlacheck.rulefiles import plain

        name = module.__name__
        policy, phases = self._plain_config()
        rules = [plain.rule_file(data) for data in self.families.get(name, [])]
        families = watch.family_captures(module, rules, self.sink, policy, phases)
        nets = watch.compile_nets(
            [plain.compile_net(data) for data in self.nets.get(name, [])], self.sink, phases, policy.replace_launch
        )
        entries = [
            entry
            for entry in watch.dry_entry_hooks([plain.rule_file(data) for data in self.entries.get(name, [])], policy)
            if entry.module_name == name
        ]
        self.captures[name] = families + nets + entries
        for capture in families:
            self._safely(functools.partial(self._install_family, capture))
        for hook in nets + entries:
            self._safely(lambda hook=hook: hook.install(module))
        self._serving_already(self.captures[name])

    def _copies(self) -> None:
        """Copies of a netted builder under another name (`capture.net_copies`): netted at serving start. Where no
        compile net names copies there is nothing to look for, and nothing is loaded (inspect among it: a process that
        did not load it itself paid it at its end)."""
        if not any(data.get("copies") for datas in self.nets.values() for data in datas):
            return
        from mlacheck.capture.net_copies import CopyNets

        self.captures.setdefault("", [CopyNets(self.nets, self.sink, *self._plain_config())])

    def _install_family(self, capture) -> None:
        """A family's capture put in place; a rule naming what its module lacks (a typo, a stale rule) leaves the family
        unwatched here: an `unseen` line, the rule's to fix, not an error of mlacheck's."""
        try:
            capture.install()
        except MlacheckError as exc:  # (its message begins with the family's name, as its Patches label it)
            self.sink.write(unseen_event(capture.family.name, "not watched: " + str(exc).partition(": ")[2]))

    def _watch(self, name: str) -> None:
        """Install the watcher of module `name` (its capture class is named in the config as MODULE:CLASS)."""
        import importlib

        watcher = self.watchers[name]
        module_name, class_name = qualnames.split(watcher["capture"])
        policy, phases = self._plain_config()
        capture = getattr(importlib.import_module(module_name), class_name)(watcher["rule"], self.sink, policy, phases)
        self.captures[name] = [capture]
        capture.on_flush = lambda: found.rescan(self, "at a counts flush")
        capture.install()
        self._serving_already([capture])

    def _plain_config(self) -> tuple:
        """The capture policy and the engine frames of capture.json (refused, in one line, where another mlacheck wrote
        a format this one does not read)."""
        from mlacheck.capture.policy import CapturePolicy
        from mlacheck.rulefiles import plain

        plain.check_config(self.config, os.path.join(self.run_dir, CAPTURE_CONFIG))
        phases = tuple(plain.phase_rule(phase) for phase in self.config.get("phases", []))
        return CapturePolicy(**self.config.get("policy", {})), phases

    def _serving_kept(self, when: str) -> None:
        """A new trace of a process that marked serving start already (a forked child, an image after an exec that
        failed) says so first: its captures know it (the fork copied them, `_serving_already` tells new ones)."""
        if self._serving:
            self._safely(lambda: self.sink.write(serving_start_event(f"marked {when}", None)))

    def _serving_already(self, captures: list) -> None:
        """Captures installed after this process marked serving start: their compiles from now on are serving."""
        if self._serving:
            for capture in captures:
                if capture.installed:
                    self._safely(capture.serving_started)

    def _all_captures(self) -> list:
        return [capture for captures in self.captures.values() for capture in captures if capture.installed]

    def _phase_changed(self) -> None:
        for capture in self._all_captures():
            self._safely(capture.phase_changed)

    def _wrap(self, module, qualname: str, hook, at: str) -> None:
        """Call `hook` when `module:qualname` is called ("call"), returns ("return") or both (undone at stop)."""

        def around(function):
            def marked(*args, **kwargs):
                if at != "return":
                    hook()
                try:
                    return function(*args, **kwargs)
                finally:
                    if at != "call":
                        hook()

            marked.__wrapped__ = function
            marked.__name__ = getattr(function, "__name__", qualname.rpartition(".")[2])
            marked.__qualname__ = getattr(function, "__qualname__", qualname)
            return marked

        self._replace(module, qualname, around)

    def _time_steps(self, module, qualname: str) -> None:
        """Time each call of an engine's step function `module:qualname` (`program/steps.py`; undone at stop)."""
        from mlacheck.program.steps import StepClock

        clock = StepClock(
            f"{module.__name__}:{qualname}", lambda event: self._safely(lambda: self.sink.write(event)), self._marked
        )
        self._replace(module, qualname, clock.timed)

    def _marked(self) -> bool:
        return self._serving

    def _replace(self, module, qualname: str, around) -> None:
        """Put `around(function)` in place of `module:qualname` (undone at stop)."""
        from mlacheck.capture.install import Patches

        if self._patches is None:
            self._patches = Patches("agent")
        owner, attribute = self._patches.function(qualname, module)
        self._patches.replace(owner, attribute, around(getattr(owner, attribute)))

    def _after_fork(self) -> None:
        if self._finder not in sys.meta_path:  # stopped: a later fork is not observed
            return
        self._forked_from, self._pid = self._pid, os.getpid()

        def child() -> None:
            self.sink.reopen(trace_path(self.run_dir, self._pid, self._host))
            self._write_run_event()
            self._serving_kept(f"in the parent, pid {self._forked_from}, before the fork")
            for capture in self._all_captures():
                capture.after_fork()
            ending.watch(self.sink)
            ending.fork_exit(lambda: self.stop(how="os._exit"))

        self._safely(child)

    def _write_run_event(self) -> None:
        self.sink.header = event = run_event(
            os.getpid(),
            start_run_clock(),
            ppid=os.getppid(),
            host=os.uname().nodename,
            pgid=os.getpgrp(),
            argv=list(sys.argv),
            rank=spawns.environment_rank(),
            target_arch=self._target_arch(),
            forked_from=self._forked_from,
            found_by=self.found_by,
            start_ticks=reaps.start_ticks(),
        )
        self.sink.write(event)

    def _write_context(self) -> None:
        engine = next((name for name, module in self.engines if module in sys.modules), None)
        values = {"target_arch": self._target_arch(), "engine": engine}
        self.sink.write(context_event(values))

    def _target_arch(self) -> str | None:
        """The target arch the process's compiles take: the first variable the families read it from that is set,
        else the arch of the CUDA device the process already uses (never initialising CUDA for it)."""
        named = next((os.environ[name] for name in self.arch_env if os.environ.get(name)), None)
        torch = sys.modules.get("torch")
        if named is not None or torch is None:
            return named
        try:
            from mlacheck import arch  # here: only a process with torch loaded may need it

            return arch.of_capability(*torch.cuda.get_device_capability()) if torch.cuda.is_initialized() else None
        except Exception:  # noqa: BLE001 - a device that cannot answer names no arch
            return None

    def _safely(self, action) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - the program goes on whatever capture does
            write_internal_error(self.sink, "agent", exc)


def current() -> Agent | None:
    """The agent of this process, if it is observed."""
    return _current


def _from_environment(value: str) -> list[dict]:
    """MLACHECK_SERVING_START's MODULE:QUALNAME[@return] items as serving starts (a malformed item is skipped)."""
    entries = (qualnames.serving_start(part) for part in filter(None, (part.strip() for part in value.split(","))))
    return [{"function": f"{module}:{qualname}", "at": at} for module, qualname, at in filter(None, entries)]


def _caller_site() -> str | None:
    from mlacheck.capture.stack import frame_site

    frame = sys._getframe(1)
    while frame is not None and (frame.f_globals.get("__name__") or "").startswith("mlacheck"):
        frame = frame.f_back
    return frame_site(frame) if frame is not None else None


def start_agent(run_dir: str, found_by: str) -> Agent:
    """Start this process's agent for the run in `run_dir` (once: a second start path finds it started).

    The folder must be this user's alone (trust.UntrustedFolder, before anything in it is read). Of what capture.json
    says, the run's environment (what --dry sets for the program) fills only what this process's own environment
    lacks, and only variables the rules read the target from or mlacheck's own (a process found through the registry
    may have been started with a cleared one); watchers come from mlacheck's own modules only."""
    if _current is not None:
        return _current
    check_folder(run_dir)
    config = read_json(os.path.join(run_dir, CAPTURE_CONFIG), what="a capture configuration")
    if not isinstance(config, dict) or not isinstance(config.get("families"), list):
        raise MlacheckError(f"{os.path.join(run_dir, CAPTURE_CONFIG)}: not a capture configuration mlacheck wrote")
    schemas.check("capture.json", config.get("format_version"), os.path.join(run_dir, CAPTURE_CONFIG))
    for name, value in allowed_environment(config).items():
        os.environ.setdefault(name, value)
    watchers = config.get("watchers") or []
    config["watchers"] = [watcher for watcher in watchers if own_watcher(watcher)]
    agent = Agent(run_dir, config, found_by)
    agent.start()
    for watcher in watchers:
        if watcher not in config["watchers"]:
            agent.sink.write(
                internal_error_event(
                    "agent", f"capture.json names a watcher outside mlacheck ({str(watcher)[:200]}): not loaded"
                )
            )
    return agent


def start_from_environment() -> Agent | None:
    """Start an agent when this process belongs to a program-mode run (MLACHECK_RUN_DIR is set), unless started."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if _current is not None or not run_dir:
        return _current
    return start_agent(run_dir, "environment")
