"""pytest plugin: `pytest --mlacheck` observes the test session as `mlacheck run -- pytest` would.

The pytest process gets an in-process agent, and every Python subprocess that a test starts gets one
through mlacheck's .pth or the bootstrap folder on PYTHONPATH (set for the session, restored at its end); the
session is registered (program/registry.py), so a subprocess started with a cleared environment finds it; a
watcher process records the session's process tree (program/watch.py: pytest is not made a subreaper, so a test's
orphan is not followed), so a Python subprocess that nothing of mlacheck reached is named, and at the session's end
ends what the tests left running (meta.json's `left_behind`). At the end of the session the run folder is analysed
into the same report model as `mlacheck run`; a session whose tests passed fails when the report fails (exit 1) or
is incomplete (exit 2, unless --mlacheck-allow-incomplete), and the terminal summary gets an "mlacheck" section.
A session stopped early (Ctrl-C, -x, --maxfail) says so in meta.json's `session` (program/ends.py: INCOMPLETE); each
output file is written at the start as an INCOMPLETE report, replaced at the end (a test's os._exit leaves that); a
document that must be a whole file (json, sarif, junit, html) cannot go to stdout, which is pytest's.

The session is one `Observation` (program/observation.py): prepared and started when pytest is configured, stopped
and reported when the session finishes. Its options are made from the settings table (mlacheck/config.py), read over
[tool.mlacheck] as the CLI's are, and an error names the option (`--mlacheck-run-dir=PATH`) or the file's key.

Registered through the `pytest11` entry point, so this module is imported by every pytest run: until --mlacheck is
given it imports nothing of mlacheck but the settings table and the output formats' registry (for the help; standard
library only).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

PLUGIN_NAME = "mlacheck-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--mlacheck, and an --mlacheck-NAME option per setting of mlacheck/config.py's table that the plugin takes."""
    from mlacheck.config import SETTINGS
    from mlacheck.report.formats import OUTPUT_HELP

    group = parser.getgroup("mlacheck", "mlacheck: JIT-kernel warm-up vs runtime dispatch")
    group.addoption(
        "--mlacheck",
        action="store_true",
        default=False,
        help="Observe the session's kernel compile caches (this process and its Python subprocesses); "
        "error findings, or a check that saw nothing, fail the session.",
    )
    for setting in SETTINGS.values():
        if setting.pytest:
            group.addoption(setting.option, default=None, help=setting.described(OUTPUT_HELP), **_parsed(setting))


def _parsed(setting) -> dict:
    """How pytest parses a setting's option (None where it is not given: the file's setting, or the default)."""
    if setting.kind == "flag":
        return {"action": "store_true"}
    if setting.kind == "choice":
        return {"choices": setting.choices}
    how = {"metavar": setting.metavar, "action": "append" if setting.repeated else "store"}
    return how | ({"type": int} if setting.kind == "int" else {})


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("mlacheck") or hasattr(config, "workerinput"):
        # pytest-xdist workers are subprocesses of the controller: the bootstrap already observes them.
        return
    config.pluginmanager.register(MlacheckSession(config), PLUGIN_NAME)


class MlacheckSession:
    """The observation of one session; registered on the plugin manager, so its hooks run too."""

    def __init__(self, config: pytest.Config) -> None:
        from mlacheck.config import SETTINGS, Settings
        from mlacheck.errors import MlacheckError
        from mlacheck.program.layout import ENV_RUN_DIR
        from mlacheck.program.observation import Observation
        from mlacheck.program.session import ProgramOptions
        from mlacheck.report.common import printable
        from mlacheck.report.formats import output_specs
        from mlacheck.report.policy import ReportPolicy

        self.config, self.report, self.error, self.failed_session = config, None, None, False
        if os.environ.get(ENV_RUN_DIR):
            raise pytest.UsageError(
                f"--mlacheck: this pytest is already observed ({ENV_RUN_DIR}={os.environ[ENV_RUN_DIR]}, e.g. under "
                "`mlacheck run -- pytest`); use one of the two"
            )
        given = {name: config.getoption(setting.option) for name, setting in SETTINGS.items() if setting.pytest}
        settings = Settings("pytest", {name: value for name, value in given.items() if value is not None})
        try:  # the options over the [tool.mlacheck] of the nearest pyproject.toml (the CLI's precedence)
            settings = settings.read(config.rootpath)
            settings.check()
            self.specs = output_specs(settings.outputs(), shared_stdout=True)
            self.policy = ReportPolicy.of(**settings.policy())
            self.observation = Observation(ProgramOptions(**settings.program()), self.policy)
            self.observation.prepare()
            self._write_placeholders()
        except MlacheckError as exc:
            raise pytest.UsageError(f"mlacheck: {printable(settings.line(exc))}") from None
        self.settings = settings
        self.tests, self.ran = 0, 0
        self.observation.start()

    def _write_placeholders(self) -> None:
        """Each output file, written now as an INCOMPLETE report of its format (replaced when the session finishes):
        a session that never gets there (a test's os._exit, pytest killed) leaves no file a CI step reads as clean."""
        from mlacheck import __version__
        from mlacheck.report.formats import write_outputs
        from mlacheck.report.model import Report, decide

        why = (
            "the session ended before mlacheck reported (a test ended the pytest process, e.g. os._exit, or it was "
            f"killed): mlacheck report {self.observation.run_dir} reports what was recorded"
        )
        report = Report(
            verdict="incomplete",
            mode="program",
            mlacheck_version=__version__,
            incomplete=[why],
            program={"command": self._command()},
        )
        write_outputs(decide(report, self.policy), [spec for spec in self.specs if spec[1] is not None], publish=False)

    def _command(self) -> list[str]:
        return ["pytest", *self.config.invocation_params.args]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests = len(session.items)  # (pytest-xdist's controller collects none: how many is then not said)

    def pytest_runtest_logfinish(self) -> None:  # (pytest-xdist's controller gets its workers' too)
        self.ran += 1

    def pytest_report_header(self, config: pytest.Config) -> str:
        return f"mlacheck: recording into {self.observation.run_dir}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from mlacheck.errors import MlacheckError
        from mlacheck.report.formats import write_outputs

        try:
            self.observation.stop(self._command(), int(session.exitstatus), self._session(session))
            self.report = _without_collections(self.observation.report)
            if any(path is None for _, path in self.specs):
                self._fresh_line()
            write_outputs(self.report, self.specs)
        except MlacheckError as exc:
            self.error = self.settings.line(exc)
        if session.exitstatus == pytest.ExitCode.OK:
            if self.error is not None:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
            elif self.report.verdict == "fail" or (self.report.verdict == "incomplete" and self.report.exit_code == 2):
                session.exitstatus = self.report.exit_code
            self.failed_session = session.exitstatus != pytest.ExitCode.OK

    def _session(self, session: pytest.Session) -> dict:
        """How far the session got (meta.json's `session`, program/ends.py): stopped early where it was interrupted
        (Ctrl-C) or stopped by -x / --maxfail (or a plugin) before every test ran."""
        if session.shouldfail:
            stopped = f"-x or --maxfail: {session.shouldfail}"
        elif session.exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop:
            stopped = (
                f"stopped: {session.shouldstop}" if isinstance(session.shouldstop, str) else "interrupted (Ctrl-C)"
            )
        else:
            stopped = None
        return {"tests": self.tests, "ran": self.ran, "stopped": stopped}

    def _fresh_line(self) -> None:
        """Start the document that goes to stdout on a line of its own: pytest's progress line ("[100%]") and a test's
        output under -s may be unfinished (an annotation that does not start its line is no annotation)."""
        import sys

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.flush()
        sys.stdout.write("\n")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.observation.stop()  # a session that ended before sessionfinish: still leave the environment as it was

    def pytest_terminal_summary(self, terminalreporter) -> None:
        from mlacheck.report.common import printable

        def write(line: str, **markup) -> None:  # a run's strings, control characters escaped
            terminalreporter.write_line(printable(line), **markup)

        terminalreporter.write_sep("=", "mlacheck")
        write(f"run folder: {self.observation.run_dir}")
        if self.error is not None:
            write(f"mlacheck error: {self.error}", red=True, bold=True)
            return
        report = self.report
        if report is None:
            write("no analysis: the session ended before mlacheck could read the run folder", yellow=True)
            return
        verbose = self.config.getoption("verbose") > 0
        for finding in report.findings:
            error = finding["severity"] == "error"
            write(
                _finding_line(finding),
                red=error and not finding["baselined"] and not finding["ignored"],
                yellow=not error,
            )
            if verbose:
                write(f"    {finding['message']}")
                write(f"    fix: {finding['hint']}")
        for reason in report.incomplete:
            write(f"incomplete: {reason}", purple=True)
        if report.not_checked:
            needed = " ".join(f"{name}=..." for name in report.context_needed)
            write(
                f"not checked: {len(report.not_checked)} contract(s) lack run context"
                + (f": give {self.settings.spell('context')} {needed}" if needed else "")
            )
        for message in report.internal_errors:
            write(f"internal error in capture (the program went on): {message}", purple=True)
        write(
            _verdict_line(report),
            red=report.verdict == "fail",
            green=report.verdict == "pass",
            purple=report.verdict == "incomplete",
            bold=True,
        )
        if self.failed_session:
            write(f"the session fails on mlacheck's verdict ({report.exit_reason}), though its tests passed", red=True)
        if report.findings:
            write(f"full report: mlacheck report {self.observation.run_dir}")


def _without_collections(make: Callable[[], T]) -> T:
    """`make()` with the garbage collector paused (a report of 10^5 variants makes objects by the million, and each
    collection would walk them all), then as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return make()
    finally:
        if enabled:
            gc.enable()


def _finding_line(finding: dict) -> str:
    """A finding in one line: whether it is ignored or known, its code, family, summary, process and site."""
    known = "ignored: " if finding["ignored"] else "known: " if finding["baselined"] else ""
    line = f"{known}{finding['code']} {finding['name']} [{finding['severity']}] {finding['family']} "
    line += finding["summary"] or finding["message"]
    if process := finding["process"]:
        rank = process.get("rank")
        line += f" [pid {process.get('pid')}{f', rank {rank}' if rank is not None else ''}]"
    return line + (f" at {finding['site']}" if finding["site"] else "")


def _verdict_line(report) -> str:
    counts = report.counts
    variants = [v for family in report.families for v in family.variants]
    return (
        f"verdict: {report.verdict.upper()}  {counts.errors} error(s), {counts.warnings} warning(s)"
        + (f", {counts.baselined} known from the baseline" if counts.baselined else "")
        + (f", {counts.ignored} ignored" if counts.ignored else "")
        + (" (strict: warnings fail)" if report.strict else "")
        + f"; {len(variants)} variant(s), {sum(v['precompiled'] for v in variants)} precompiled, "
        f"{sum(v['dispatches'] for v in variants)} dispatch(es) in {len(report.processes)} process(es)"
    )
