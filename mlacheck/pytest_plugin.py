"""pytest plugin: `pytest --mlacheck` observes the test session as `mlacheck run -- pytest` would.

The pytest process gets an in-process agent, and every Python subprocess that a test starts gets one
through mlacheck's .pth or the bootstrap folder on PYTHONPATH (set for the session, restored at its end); the
session is registered (program/registry.py), so a subprocess started with a cleared environment finds it; a
watcher process records the session's process tree (program/watch.py: pytest is not made a subreaper, so a test's
orphan is not followed), so a Python subprocess that nothing of mlacheck reached is named. At the end of the
session the run folder is analysed into the same report model as `mlacheck run`; a session whose tests
passed fails when the report fails (exit 1) or is incomplete (exit 2, unless --mlacheck-allow-incomplete),
and the terminal summary gets an "mlacheck" section.

Registered through the `pytest11` entry point, so this module is imported by every pytest run: until --mlacheck is
given it imports nothing of mlacheck but the output formats' registry (for the help; standard library only).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

PLUGIN_NAME = "mlacheck-session"
FLAG_NAMES = {
    "--run-dir ": "--mlacheck-run-dir=",
    "--rules ": "--mlacheck-rules=",
    "--output ": "--mlacheck-output=",
    "--baseline ": "--mlacheck-baseline=",
    "--context ": "--mlacheck-context=",
    "--num-sms ": "--mlacheck-num-sms=",
    "--arch ": "--mlacheck-arch=",
    "--serving-start ": "--mlacheck-serving-start=",
    "--select ": "--mlacheck-select=",
    "--ignore ": "--mlacheck-ignore=",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    from mlacheck.report.formats import OUTPUT_HELP

    group = parser.getgroup("mlacheck", "mlacheck: JIT-kernel warm-up vs runtime dispatch")
    group.addoption(
        "--mlacheck",
        action="store_true",
        default=False,
        help="Observe the session's kernel compile caches (this process and its Python subprocesses); "
        "error findings, or a check that saw nothing, fail the session.",
    )
    group.addoption(
        "--mlacheck-rules", metavar="PATH", default=None, help="A rule file or folder that replaces the bundled rules."
    )
    group.addoption(
        "--mlacheck-run-dir",
        metavar="PATH",
        default=None,
        help="The run folder, new or empty (default mlacheck-runs/<time>-<pid>).",
    )
    group.addoption(
        "--mlacheck-compile",
        choices=("real", "skip"),
        default="real",
        help="real: compile and time every variant; skip: record keys only (kernels then cannot launch).",
    )
    group.addoption(
        "--mlacheck-dry",
        action="store_true",
        default=False,
        help="The watched dispatches run past their lookup without the target GPU; nothing launches.",
    )
    group.addoption(
        "--mlacheck-arch",
        metavar="ARCH",
        default="auto",
        help="With --mlacheck-dry: the target arch (sm_90a, sm_100a, ...; default: the one the families read, else "
        "sm_100a).",
    )
    group.addoption(
        "--mlacheck-num-sms",
        metavar="N",
        type=int,
        default=None,
        help="With --mlacheck-dry: the target GPU's SM count (default: the target arch's flagship).",
    )
    group.addoption(
        "--mlacheck-context",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="A run-context value that contracts read (kv_cache_dtype, d_qk, ...); repeatable.",
    )
    group.addoption(
        "--mlacheck-serving-start",
        metavar="MODULE:QUALNAME[@return]",
        action="append",
        default=[],
        help="A function whose call (or return) marks serving start; repeatable.",
    )
    group.addoption(
        "--mlacheck-output",
        metavar="FORMAT:PATH",
        action="append",
        default=[],
        help=f"Also write the report: {OUTPUT_HELP}; repeatable.",
    )
    group.addoption("--mlacheck-json", metavar="PATH", default=None, help="Also write the JSON report here.")
    group.addoption(
        "--mlacheck-baseline",
        metavar="PATH",
        default=None,
        help="A saved JSON report or baseline: its findings show as known and do not fail.",
    )
    group.addoption(
        "--mlacheck-select",
        metavar="CODES",
        action="append",
        default=None,
        help="Finding codes that count (MLA001,MLA003); the others are listed as ignored and never fail.",
    )
    group.addoption(
        "--mlacheck-ignore",
        metavar="CODES",
        action="append",
        default=None,
        help="Finding codes listed as ignored, never failing (MLA002).",
    )
    group.addoption("--mlacheck-strict", action="store_true", default=None, help="Warnings fail the session too.")
    group.addoption(
        "--mlacheck-allow-incomplete",
        action="store_true",
        default=False,
        help="A check that saw nothing to compare does not fail the session.",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("mlacheck") or hasattr(config, "workerinput"):
        # pytest-xdist workers are subprocesses of the controller: the bootstrap already observes them.
        return
    config.pluginmanager.register(MlacheckSession(config), PLUGIN_NAME)


def _usage_error(message: str) -> pytest.UsageError:
    """The library's one-line message, naming this plugin's options instead of the CLI's."""
    from mlacheck.report.common import printable

    for flag, option in FLAG_NAMES.items():
        message = message.replace(flag, option)
    return pytest.UsageError(f"mlacheck: {printable(message)}")


def _start_watcher(run_dir: Path):
    """The process that records the session's process tree (program/watch.py), once it has started; None where it
    cannot start (the report then names no Python process that ran without mlacheck)."""
    import subprocess
    import sys

    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "mlacheck.program.watch", str(os.getpid()), str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    except OSError:
        return None
    if watcher.stdout.readline().strip() != "ready":
        watcher.kill()
        watcher.wait()
        return None
    return watcher


class MlacheckSession:
    """The state of one observed session; registered on the plugin manager, so its hooks run too."""

    def __init__(self, config: pytest.Config) -> None:
        from mlacheck.errors import MlacheckError
        from mlacheck.program import registry
        from mlacheck.program.agent import ENV_RUN_DIR, Agent
        from mlacheck.program.session import ProgramOptions, prepare_run
        from mlacheck.program.supervisor import observed_environment

        self.config = config
        option = config.getoption
        self.compile_policy, self.dry = option("mlacheck_compile"), bool(option("mlacheck_dry"))
        self.report = None
        self.error: str | None = None
        self.failed_session = False
        if os.environ.get(ENV_RUN_DIR):
            raise pytest.UsageError(
                f"--mlacheck: this pytest is already observed ({ENV_RUN_DIR}={os.environ[ENV_RUN_DIR]}, e.g. under "
                "`mlacheck run -- pytest`); use one of the two"
            )
        try:
            from mlacheck.config import load_config, named
            from mlacheck.context import parse_context
            from mlacheck.report.formats import output_specs
            from mlacheck.report.model import ReportPolicy

            # [tool.mlacheck] of the nearest pyproject.toml where an option is not given (the CLI's precedence); an
            # error names a value where the user wrote it (this plugin's option, or the file's key)
            settings, pyproject = load_config(Path(str(config.rootpath)))
            outputs = [(spec, f"--mlacheck-output={spec}") for spec in option("mlacheck_output")] or [
                (spec, f"{named('output', pyproject)} {spec}") for spec in settings.output or []
            ]
            if option("mlacheck_json"):
                outputs.append((f"json:{option('mlacheck_json')}", f"--mlacheck-json={option('mlacheck_json')}"))
            self.specs = output_specs(outputs)
            names = {
                name: f"--mlacheck-{name}" if option(f"mlacheck_{name}") else named(name, pyproject)
                for name in ("baseline", "select", "ignore")
            }
            self.policy = ReportPolicy.of(
                bool(option("mlacheck_strict") if option("mlacheck_strict") is not None else settings.strict),
                bool(option("mlacheck_allow_incomplete")),
                Path(option("mlacheck_baseline")) if option("mlacheck_baseline") else settings.baseline,
                option("mlacheck_select") or settings.select,
                option("mlacheck_ignore") or settings.ignore,
                names,
            )
            self.options = ProgramOptions(
                Path(option("mlacheck_run_dir")) if option("mlacheck_run_dir") else None,
                Path(option("mlacheck_rules")) if option("mlacheck_rules") else settings.rules,
                self.compile_policy,
                self.dry,
                option("mlacheck_arch"),
                option("mlacheck_num_sms"),
                tuple(option("mlacheck_serving_start")),
                {**settings.context, **parse_context(option("mlacheck_context"), "--mlacheck-context")},
            )
            prepared = prepare_run(self.options)
        except MlacheckError as exc:
            raise _usage_error(str(exc)) from None
        self.run, self.rules = prepared.folder, prepared.rules
        self.started = time.time()
        self._watcher = _start_watcher(self.run.path)
        self._saved_environment: dict[str, str | None] = {}
        environment = {**prepared.environment, **observed_environment(self.run, dict(os.environ))}
        for name, value in environment.items():
            if os.environ.get(name) != value:
                self._saved_environment[name] = os.environ.get(name)
                os.environ[name] = value
        self.agent = Agent(str(self.run.path), prepared.capture_config, found_by="plugin")
        self.agent.start()
        try:  # a subprocess started with a cleared environment finds the session through the registry
            self._registered: str | None = registry.register(os.getpid(), str(self.run.path))
        except OSError:
            self._registered = None

    def _restore_environment(self) -> None:
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = {}

    def _finish_recording(self) -> None:
        self._restore_environment()
        if self._watcher is not None:  # it writes the process tree when its input closes
            import subprocess

            try:  # "done": else the watcher takes the session for killed, and ends what is left of it
                self._watcher.stdin.write("done\n")
                self._watcher.stdin.close()
            except OSError:
                pass
            try:
                self._watcher.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
            self._watcher = None
        if self._registered is not None:
            from mlacheck.program import registry

            registry.unregister(self._registered)
            self._registered = None
        self.agent.stop()

    def pytest_report_header(self, config: pytest.Config) -> str:
        return f"mlacheck: recording into {self.run.path}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from mlacheck.errors import MlacheckError
        from mlacheck.program.saved import program_report
        from mlacheck.report.formats import write_outputs

        self._finish_recording()
        try:
            self.run.write_meta(
                {
                    "command": ["pytest", *self.config.invocation_params.args],
                    "started": self.started,
                    "ended": time.time(),
                    "compile_policy": self.compile_policy,
                    "dry": self.dry,
                    "exit_code": int(session.exitstatus),
                    "signal": None,
                }
            )
            self.report = program_report([self.run.path], self.rules, self.options.context, self.policy)
            write_outputs(self.report, self.specs)
        except MlacheckError as exc:
            self.error = str(exc)
        if session.exitstatus == pytest.ExitCode.OK:
            if self.error is not None:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
            elif self.report.verdict == "fail" or (self.report.verdict == "incomplete" and self.report.exit_code == 2):
                session.exitstatus = self.report.exit_code
            self.failed_session = session.exitstatus != pytest.ExitCode.OK

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._finish_recording()  # a session that ended before sessionfinish: still leave the environment as it was

    def pytest_terminal_summary(self, terminalreporter) -> None:
        from mlacheck.report.common import printable

        def write(line: str, **markup) -> None:  # a run's strings, control characters escaped
            terminalreporter.write_line(printable(line), **markup)

        terminalreporter.write_sep("=", "mlacheck")
        write(f"run folder: {self.run.path}")
        if self.error is not None:
            write(f"mlacheck error: {self.error}", red=True, bold=True)
            return
        report = self.report
        if report is None:
            write("no analysis: the session ended before mlacheck could read the run folder", yellow=True)
            return
        verbose = self.config.getoption("verbose") > 0
        for finding in report.findings:
            error = finding.severity == "error"
            known = "ignored: " if finding.ignored else "known: " if finding.baselined else ""
            line = f"{known}{finding.code} {finding.name} [{finding.severity}] "
            line += f"{finding.family} "
            line += finding.summary or finding.message
            if finding.process:
                rank = finding.process.get("rank")
                line += f" [pid {finding.process.get('pid')}{f', rank {rank}' if rank is not None else ''}]"
            write(
                line + (f" at {finding.site}" if finding.site else ""),
                red=error and not finding.baselined and not finding.ignored,
                yellow=not error,
            )
            if verbose:
                write(f"    {finding.message}")
                write(f"    fix: {finding.hint}")
        for reason in report.incomplete:
            write(f"incomplete: {reason}", purple=True)
        if report.not_checked:
            needed = " ".join(f"{name}=..." for name in report.context_needed)
            write(
                f"not checked: {len(report.not_checked)} contract(s) lack run context"
                + (f": give --mlacheck-context {needed}" if needed else "")
            )
        for message in report.internal_errors:
            write(f"internal error in capture (the program went on): {message}", purple=True)
        variants = [v for family in report.families for v in family.variants]
        write(
            f"verdict: {report.verdict.upper()}  {report.counts.errors} error(s), {report.counts.warnings} warning(s)"
            + (f", {report.counts.baselined} known from the baseline" if report.counts.baselined else "")
            + (f", {report.counts.ignored} ignored" if report.counts.ignored else "")
            + (" (strict: warnings fail)" if report.strict else "")
            + f"; {len(variants)} variant(s), {sum(v.precompiled for v in variants)} precompiled, "
            f"{sum(v.dispatches for v in variants)} dispatch(es) in {len(report.processes)} process(es)",
            red=report.verdict == "fail",
            green=report.verdict == "pass",
            purple=report.verdict == "incomplete",
            bold=True,
        )
        if self.failed_session:
            write(f"the session fails on mlacheck's verdict ({report.exit_reason}), though its tests passed", red=True)
        if report.findings:
            write(f"full report: mlacheck report {self.run.path}")
