"""An observation: one run of program mode, from its options to its report, held whole by each front end as
coverage.py's `Coverage` is by its command line and by pytest-cov.

    observation = Observation(options, policy)
    observation.prepare()                # check the options against the rules, make the run folder
    observation.run(command)             # mlacheck run -- COMMAND: the program under supervision, to its end
    # or, pytest --mlacheck (this process and its children): observation.start() ... observation.stop(command, code)
    report = observation.report()        # the run folder analysed with the rules it was recorded under

`Observation.saved(sources, ...)` is the observation of run folders saved before (`mlacheck report`, `mlacheck
manifest`), or of one saved JSON report. A bad option is one MlacheckError line naming its setting.
"""

from __future__ import annotations

import functools
import gc
import os
import select
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mlacheck.errors import MlacheckError
from mlacheck.program import registry
from mlacheck.program.follow import TraceFollower
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.session import PreparedRun, ProgramOptions, prepare_run
from mlacheck.program.supervisor import Supervised, observed_environment, run_program
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import load_rules

if TYPE_CHECKING:
    from mlacheck.report.model import Report

WATCHER_SECONDS = 30  # how long the watcher may take to end what the session left and write the process tree
READY_SECONDS = 60  # how long the watcher may take to start


class Observation:
    """One observed run (or saved runs): prepare -> run, or start -> stop -> report."""

    def __init__(self, options: ProgramOptions = ProgramOptions(), policy: ReportPolicy = ReportPolicy()) -> None:
        self.options, self.policy = options, policy
        self.sources: list[Path] = []  # the run folders (or one JSON report) that report() reads
        self._prepared: PreparedRun | None = None
        self._supervised: Supervised | None = None  # what run()'s supervisor recorded, read from memory
        self._started = time.time()
        self._in_process: _InProcess | None = None

    @classmethod
    def saved(
        cls, sources: list[Path], options: ProgramOptions = ProgramOptions(), policy: ReportPolicy = ReportPolicy()
    ) -> Observation:
        """Run folders saved before (merged into one report, analysed with `options.rules` where given, else with
        those each folder saved), or one saved JSON report (decided again under `policy`)."""
        observation = cls(options, policy)
        observation.sources = list(sources)
        return observation

    @property
    def run_dir(self) -> Path | None:
        """The run folder `prepare` made (None before)."""
        return None if self._prepared is None else self._prepared.folder.path

    def prepare(self) -> Path:
        """Check the options against the rules and make the run folder (nothing runs yet); its path."""
        self._prepared = prepare_run(self.options)
        self.sources = [self._prepared.folder.path]
        return self._prepared.folder.path

    def run(self, command: list[str], watch=None) -> None:
        """Run `command` to its end, observed (mlacheck run -- COMMAND): every Python process it starts, what is left
        of it ended (program/supervisor.py); then meta.json. `watch`, a progress display (`phase(name)`,
        `event(event)`), follows the traces as the program writes them."""
        run = self._run()
        on_tick = None
        if watch is not None:
            watch.phase(f"running {shlex.join(command)}")
            follower = TraceFollower(run.folder.path)
            on_tick = lambda: [watch.event(event) for event in follower.poll()]  # noqa: E731
        # the CLI runs with collections off; this process now waits on the program for as long as it runs: they are
        # on again once the report's modules are loaded (or the program did not start)
        loaded = functools.partial(_load_report_modules, then=gc.enable)
        try:
            supervised = run_program(
                command, run.folder, extra_environment=run.environment, on_tick=on_tick, on_started=loaded
            )
        finally:
            gc.enable()
        if on_tick is not None:
            on_tick()
            watch.phase("analysing the run folder")
        supervised.meta.update(compile_policy=self.options.compile, dry=self.options.dry)
        self._supervised = supervised
        try:
            run.folder.write_meta(supervised.meta)
        except MlacheckError as exc:  # the folder vanished or is full: the report says so, from what is left
            supervised.problems.append(str(exc))

    def start(self) -> None:
        """Observe this process, and every Python process it starts, from now on (pytest --mlacheck): the run's
        environment set here (stop restores it), the run registered (a process started with a cleared environment
        finds it), a watcher process recording the process tree, and the agent started in this process."""
        run = self._run()
        self._started = time.time()
        self._in_process = _InProcess(run)

    def stop(self, command: list[str] | None = None, exit_code: int | None = None, session: dict | None = None) -> None:
        """Stop observing this process (once; again does nothing): what the session left running is ended. With
        `command`, the program's end (its command and exit code, the processes ended, and `session`: what the front
        end knows of how far the session got, see program/ends.py) goes to meta.json."""
        if self._in_process is not None:
            ended = self._in_process.stop()
            self._in_process = None
            if command is not None:
                meta = {"command": command, "started": self._started, "ended": time.time()}
                meta.update(compile_policy=self.options.compile, dry=self.options.dry)
                meta.update(exit_code=exit_code, signal=None, left_behind=ended["left_behind"])
                meta["session"] = {**(session or {}), "tree": ended["tree"]}
                self._run().folder.write_meta(meta)

    def report(self) -> Report:
        """The report: of the run, with the rules it was recorded under; or of the saved sources."""
        from mlacheck.program.saved import load_report, program_report
        from mlacheck.report.model import decide

        files = [source for source in self.sources if source.is_file()]
        if files:
            if len(self.sources) > 1:
                raise MlacheckError(
                    f"{files[0]}: give one saved JSON report, or run folders only (not both, not several reports)"
                )
            return decide(load_report(files[0]), self.policy)
        if self._prepared is None:
            rules = load_rules(self.options.rules) if self.options.rules is not None else None
            return program_report(self.sources, rules, self.options.context, self.policy)
        try:
            return program_report(
                self.sources, self._prepared.rules, self.options.context, self.policy, self._supervised
            )
        except MlacheckError as exc:  # e.g. a context value the run's keys show to be of another kind
            exc.message += f"; the run is kept: mlacheck report {self.run_dir} reports it again"
            raise

    def _run(self) -> PreparedRun:
        """The prepared run (prepared now where `prepare` was not called)."""
        if self._prepared is None:
            self.prepare()
        return self._prepared


class _InProcess:
    """Observing this process and its children: its environment, the registry entry, the watcher and the agent."""

    def __init__(self, run: PreparedRun) -> None:
        from mlacheck.program.agent import Agent

        self.folder = run.folder
        self.watcher, self.unwatched = _start_watcher(run.folder.path)
        self.saved: dict[str, str | None] = {}  # each variable set, and its value before
        for name, value in {**run.environment, **observed_environment(run.folder, dict(os.environ))}.items():
            if os.environ.get(name) != value:
                self.saved[name] = os.environ.get(name)
                os.environ[name] = value
        self.agent = Agent(str(run.folder.path), run.capture_config, found_by="plugin")
        self.agent.start()
        try:  # a subprocess started with a cleared environment finds the run through the registry
            self.entry: str | None = registry.register(os.getpid(), str(run.folder.path))
        except OSError:
            self.entry = None

    def stop(self) -> dict:
        """Stop observing; what the watcher recorded of the session's end, for meta.json: `left_behind` (the processes
        it ended, left running), and `tree`: why the process tree was not recorded (None where it was)."""
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        ended = {"left_behind": [], "tree": self.unwatched}
        if self.watcher is not None:  # it ends what the session left running, then writes the process tree
            ended = _watcher_done(self.watcher, self.folder)
        if self.entry is not None:
            registry.unregister(self.entry)
        self.agent.stop()
        return ended


def _watcher_done(watcher: subprocess.Popen, folder: RunFolder) -> dict:
    """Tell the watcher the session is done ("done": else it takes the session for killed, and ends what is left of
    it); wait for it to end what the session left running and to write the process tree; what it recorded."""
    try:
        watcher.stdin.write("done\n")
        watcher.stdin.close()
    except OSError:
        pass
    try:
        code = watcher.wait(timeout=WATCHER_SECONDS)
    except subprocess.TimeoutExpired:
        watcher.kill()
        code = watcher.wait()
    try:
        tree = folder.read_tree()
    except MlacheckError as exc:
        return {"left_behind": [], "tree": f"its record could not be read: {exc}"}
    if tree is None:
        how = f"exited {code}" if code >= 0 else f"was killed by signal {-code}"
        return {"left_behind": [], "tree": f"its watcher {how} without writing it"}
    left = [
        {
            "pid": seen["pid"],
            "start": seen.get("start"),
            "argv": seen.get("argv") or [],
            "sid": seen.get("sid"),
            "ended_by": seen["ended_by"],
        }
        for seen in tree["processes"]
        if seen.get("ended_by") is not None
    ]
    return {"left_behind": left, "tree": None}


def _load_report_modules(then: Callable[[], object]) -> None:
    """Import what the report needs (the analysis, the report model, the terminal view) on a thread of its own while
    the program runs, which the supervisor mostly waits on: the report then starts as soon as the program ends; then
    call `then`. What fails here is imported, and raises, where the report needs it."""

    def load() -> None:
        try:
            import mlacheck.program.saved  # noqa: F401
            import mlacheck.report.terminal  # noqa: F401
        except Exception:  # noqa: BLE001 - the report's own import says it
            pass
        finally:
            then()

    try:
        threading.Thread(target=load, name="mlacheck-report-imports", daemon=True).start()
    except RuntimeError:  # no thread to be had: the report imports them itself
        then()


def _start_watcher(run_dir: Path) -> tuple[subprocess.Popen | None, str | None]:
    """The process that records this process's tree (program/watch.py), once it has said it started, on a pipe of its
    own (what its interpreter prints on stdout, a sitecustomize's banner, is no handshake); else (None, why not): the
    report then says the process tree was not recorded."""
    read, write = os.pipe()
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "mlacheck.program.watch", str(os.getpid()), str(run_dir), str(write)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            pass_fds=(write,),
            text=True,
        )
    except OSError as exc:
        os.close(read)
        return None, f"its watcher could not start: {exc.strerror or exc}"
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as said:
        ready = _said_ready(said)
    if not ready:
        watcher.kill()
        watcher.stdin.close()
        code = watcher.wait()
        return None, f"its watcher ended before it was ready (exit {code})" if code >= 0 else (
            f"its watcher was killed before it was ready (signal {-code})"
        )
    return watcher, None


def _said_ready(said) -> bool:
    """Whether the watcher wrote "ready" on its pipe before closing it (or READY_SECONDS passed)."""
    deadline, text = time.monotonic() + READY_SECONDS, b""
    while b"ready\n" not in text:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([said], [], [], left)[0]:
            return False
        piece = os.read(said.fileno(), 64)
        if not piece:
            return False
        text += piece
    return True
