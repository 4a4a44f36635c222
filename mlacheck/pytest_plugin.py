"""pytest plugin: `pytest --mlacheck` observes the test session as `mlacheck run -- pytest` would.

The pytest process gets an in-process agent, and every Python subprocess that a test starts gets one
through the bootstrap folder on PYTHONPATH (set for the session, restored at its end). At the end of the
session the run folder is analysed; error findings (or any finding, with --mlacheck-strict) fail a
session whose tests passed, and the terminal summary gets an "mlacheck" section.

Registered through the `pytest11` entry point, so this module is imported by every pytest run: it
imports nothing of mlacheck (torch, pydantic, rich) until --mlacheck is given.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

PLUGIN_NAME = "mlacheck-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlacheck", "mlacheck: JIT-kernel warm-up vs runtime dispatch")
    group.addoption("--mlacheck", action="store_true", default=False,
                    help="Observe the session's kernel compile caches (this process and its Python subprocesses); "
                         "error findings fail the session.")
    group.addoption("--mlacheck-rules", metavar="PATH", default=None,
                    help="A rule file or folder that replaces the bundled rules.")
    group.addoption("--mlacheck-run-dir", metavar="PATH", default=None,
                    help="The run folder, new or empty (default mlacheck-runs/<time>-<pid>).")
    group.addoption("--mlacheck-strict", action="store_true", default=False,
                    help="Warnings fail the session too.")
    group.addoption("--mlacheck-json", metavar="PATH", default=None,
                    help="Also write the JSON report here.")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("mlacheck") or hasattr(config, "workerinput"):
        # pytest-xdist workers are subprocesses of the controller: the bootstrap already observes them.
        return
    config.pluginmanager.register(MlacheckSession(config), PLUGIN_NAME)


class MlacheckSession:
    """The state of one observed session; registered on the plugin manager, so its hooks run too."""

    def __init__(self, config: pytest.Config) -> None:
        from mlacheck.errors import MlacheckError
        from mlacheck.program.agent import ENV_RUN_DIR, Agent
        from mlacheck.program.rundir import RunDir
        from mlacheck.program.runner import observed_environment
        from mlacheck.rules import load_rules

        self.config = config
        self.compile_policy = "real"
        self.strict = bool(config.getoption("mlacheck_strict"))
        rules_option = config.getoption("mlacheck_rules")
        run_dir_option = config.getoption("mlacheck_run_dir")
        json_option = config.getoption("mlacheck_json")
        self.rules_path = Path(rules_option) if rules_option else None
        self.json_path = Path(json_option) if json_option else None
        self.result = None
        self.error: str | None = None
        self.failed_session = False
        if os.environ.get(ENV_RUN_DIR):
            raise pytest.UsageError(
                f"--mlacheck: this pytest is already observed ({ENV_RUN_DIR}={os.environ[ENV_RUN_DIR]}, e.g. under "
                "`mlacheck run -- pytest`); use one of the two")
        try:
            rules = load_rules(self.rules_path)
            self.run = RunDir.create(Path(run_dir_option) if run_dir_option else None)
            self.run.save_rules(rules)
        except MlacheckError as exc:
            # the messages name the CLI's flags; name this plugin's instead
            message = str(exc).replace("--run-dir ", "--mlacheck-run-dir ").replace("--rules ", "--mlacheck-rules ")
            raise pytest.UsageError(f"mlacheck: {message}") from None
        self.started = time.time()
        self.agent = Agent(self.run.path, rules, self.compile_policy)
        self.agent.start()
        self._saved_environment: dict[str, str | None] = {}
        observed = observed_environment(self.run, self.compile_policy, dict(os.environ))
        for name, value in observed.items():
            if os.environ.get(name) != value:
                self._saved_environment[name] = os.environ.get(name)
                os.environ[name] = value

    def _restore_environment(self) -> None:
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = {}

    def _finish_recording(self) -> None:
        self._restore_environment()
        self.agent.stop()

    def pytest_report_header(self, config: pytest.Config) -> str:
        return f"mlacheck: recording into {self.run.path}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from mlacheck.errors import MlacheckError
        from mlacheck.program.runs import program_result
        from mlacheck.report.formats import write_outputs
        from mlacheck.report.json_report import report_dict

        self._finish_recording()
        try:
            self.run.write_meta({
                "command": ["pytest", *self.config.invocation_params.args], "started": self.started,
                "ended": time.time(), "compile_policy": self.compile_policy, "exit_code": int(session.exitstatus),
                "signal": None,
            })
            self.result = program_result([self.run.path], self.rules_path, self.strict)
            if self.json_path is not None:
                write_outputs(report_dict(self.result), [f"json:{self.json_path}"])
        except (MlacheckError, OSError) as exc:
            self.error = str(exc)
        failing = self.error is not None or (self.result is not None and self.result.verdict == "fail")
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.error is None else pytest.ExitCode.USAGE_ERROR
            self.failed_session = True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._finish_recording()  # a session that ended before sessionfinish: still leave the environment as it was

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "mlacheck")
        write(f"run folder: {self.run.path}")
        if self.error is not None:
            write(f"mlacheck error: {self.error}", red=True, bold=True)
            return
        result = self.result
        if result is None:
            write("no analysis: the session ended before mlacheck could read the run folder", yellow=True)
            return
        from mlacheck.registry import Severity

        verbose = self.config.getoption("verbose") > 0
        for finding in result.analysis.findings:
            error = finding.severity is Severity.ERROR
            line = f"{finding.code} {finding.name} [{finding.severity.value}] {finding.message}"
            if finding.process is not None:
                rank = finding.process.get("rank")
                line += f" [pid {finding.process.get('pid')}{f', rank {rank}' if rank is not None else ''}]"
            write(line, red=error, yellow=not error)
            if verbose:
                write(f"    fix: {finding.hint}")
        for message in result.analysis.internal_errors:
            write(f"internal error in capture (the program went on): {message}", purple=True)
        errors = sum(f.severity is Severity.ERROR for f in result.analysis.findings)
        warnings = len(result.analysis.findings) - errors
        variants = [v for family in result.analysis.families for v in family.variants]
        counts = (f"{errors} error(s), {warnings} warning(s)" + (" (strict: warnings fail)" if result.strict else "")
                  + f"; {len(variants)} variant(s), {sum(v.precompiled for v in variants)} precompiled, "
                  f"{sum(v.dispatches for v in variants)} dispatch(es) in {len(result.header['processes'])} process(es)")
        verdict = result.verdict.upper()
        write(f"verdict: {verdict}  {counts}", red=verdict == "FAIL", green=verdict == "PASS", bold=True)
        if self.failed_session:
            write("the session fails on these findings, though its tests passed", red=True)
        if result.analysis.findings:
            write(f"full report: mlacheck report {self.run.path}")
        if self.json_path is not None:
            write(f"JSON report: {self.json_path}")
