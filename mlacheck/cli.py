"""The command line: parse, call the library, print. Exit 0 clean, 1 findings, 2 bad input, environment or an
incomplete check; with `-- COMMAND`, otherwise the program's own status.

Every error is one line on stderr (`mlacheck: error: ...`), typer's usage errors included; nothing a user
wrote is read as rich markup.
"""

from __future__ import annotations

import gc
import inspect
import os
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
import typer.core

from mlacheck import __version__
from mlacheck.commands import consoles
from mlacheck.config import SETTINGS, Settings
from mlacheck.errors import MlacheckError, flag
from mlacheck.forked import flush_standard_streams
from mlacheck.report.common import printable
from mlacheck.report.formats import OUTPUT_HELP
from mlacheck.scenario.engines import ENGINES

app = typer.Typer(
    help="Checks that a serving engine's kernel warm-up covers what its runtime dispatches.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: option names whole at 80 columns, and `[@return]` is not rich markup
    pretty_exceptions_show_locals=False,
    add_completion=False,
)


class _Command(typer.core.TyperCommand):
    """Typer's command with plain help: an argument's metavar without Typer's type hint (`<list[str]>`) and without
    the braces it puts around a required one (`{sources}...`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None

    def get_help(self, ctx) -> str:
        return re.sub(r"\{([A-Z]+)\}", r"\1", super().get_help(ctx))


# each kind of setting as typer takes it (a path as given: Settings makes it a Path; a choice: an Enum of its choices)
TYPES = {"text": str, "int": int, "path": str, "flag": bool, "list": list[str], "context": list[str]}
CHOICES = {"profile": tuple(ENGINES)}  # the engines the scenario replays; the table holds the other choices
CHOICE_TYPES = {
    name: Enum(name.title().replace("_", ""), {choice: choice for choice in CHOICES.get(name, s.choices)}, type=str)
    for name, s in SETTINGS.items()
    if s.kind == "choice"
}
RUN = tuple(SETTINGS)  # run takes every setting; those of one mode are refused in the other
REPORT = ("rules", "json", "strict", "allow_incomplete", "context", "output", "baseline", "select", "ignore")
REPORT += ("quiet", "verbose")


def _option(name: str, help: str | None = None) -> typer.models.OptionInfo:
    """Setting `name`'s option, from the settings table (a program-mode one says so in its help)."""
    setting = SETTINGS[name]
    text = help or setting.described(f"{OUTPUT_HELP} (the report then goes to stderr)")
    if help is None and setting.mode == "program":
        text = f"Program mode: {text[0].lower()}{text[1:]}"
    return typer.Option(*setting.flags, metavar=setting.metavar, help=text)


def _parameter(name: str, help: str | None = None) -> inspect.Parameter:
    setting = SETTINGS[name]
    kind = CHOICE_TYPES.get(name) or TYPES[setting.kind]
    default = setting.default if setting.kind != "choice" or setting.default is None else kind(setting.default)
    annotation = kind if default is not None else kind | None
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, _option(name, help)], default=default
    )


def _settings_command(*names: str, arguments: tuple[inspect.Parameter, ...] = (), help: dict | None = None):
    """A command whose options are the settings `names` (typer reads the signature made here): it is called with
    the typer context and each setting's value by name."""

    def made(function):
        context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        options = [_parameter(name, (help or {}).get(name)) for name in names]
        function.__signature__ = inspect.Signature([context, *arguments, *options])
        return function

    return made


def _argument(name: str, annotation, metavar: str, help: str, default=inspect.Parameter.empty) -> inspect.Parameter:
    argument = typer.Argument(metavar=metavar, help=help)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, argument], default=default
    )


def _version_callback(value: bool) -> None:
    if value:
        consoles.console().print(f"mlacheck {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print mlacheck's version and exit."),
    ] = False,
) -> None:
    """Checks that a serving engine's kernel warm-up covers what its runtime dispatches."""


COMMAND = _argument(
    "command", list[str] | None, "COMMAND", "Program mode: after --, a command to run and observe.", None
)
SOURCES = _argument(
    "sources", list[Path], "SOURCE", "Run folders of program-mode runs (e.g. one per node), or one saved JSON report."
)


@app.command(cls=_Command, short_help="Check the embedded scenario, or observe a program (-- CMD).")
@_settings_command(*RUN, arguments=(COMMAND,))
def run(ctx: typer.Context, **values: object) -> None:
    """Run the embedded scenario (warm-up, then traffic through the kernels' own dispatch), or with
    `-- COMMAND`, run a program and observe every Python process it starts; report mismatches."""
    command = values["command"]
    if not command and sys.argv[-1:] == ["--"]:  # (the parser keeps no trace of a `--` with nothing after it)
        _fail("nothing after --: give the command to observe (mlacheck run -- python serve.py), or leave -- out")
    given = _given(ctx, values)
    other = "scenario" if command else "program"
    refused = sorted(name for name in given if SETTINGS[name].mode == other)
    if refused:
        where = "a program (-- COMMAND)" if command else "the embedded scenario (they need -- COMMAND)"
        _fail(f"{', '.join(map(flag, refused))}: does not apply to {where}")
    detail = _detail(values["quiet"], values["verbose"])
    settings, specs, policy = _inputs(given)
    if settings["trace"] is not None:
        from mlacheck.report.formats import check_writable

        trace = settings["trace"]  # checked before the run: a trace it cannot write loses it
        _guard(lambda: check_writable(trace, "trace", trace), settings)
    if command:
        report = _program(command, settings, policy, detail)
    else:
        with consoles.progress(detail, live=True) as watch:
            report = _scenario(settings, policy, watch, detail)
        if "warmup" in given and report.scenario is not None and report.scenario.get("warmup") is None:
            said = settings.spell
            unused = (
                f"{said('warmup', settings['warmup'])}: never called: this run ({said('profile', settings['profile'])}"
                f", {said('kernel', settings['kernel'])}) compiles no prefill kernel, so no prefill warm-up ran and the "
                "check above did not test yours; drop --warmup, or check a profile whose prefill compiles (see "
                "--profile in mlacheck run --help)"
            )
            _finish(report, specs, detail, unused)
    _finish(report, specs, detail, settings=settings)


def _program(command: list[str], settings: Settings, policy, detail: str):
    """`command` run and observed into a new run folder, and its report."""
    from mlacheck.program.observation import Observation
    from mlacheck.program.session import ProgramOptions

    _check_startable(command)
    observation = Observation(ProgramOptions(**settings.program()), policy)
    path = _guard(observation.prepare, settings)
    consoles.say(f"mlacheck: run folder {printable(str(path))}", stderr=True)
    with consoles.progress(detail, live=False) as watch:
        _guard(lambda: observation.run(command, watch), settings)
    gc.disable()  # the program ended: its report is made with collections off, as `mlacheck report`'s is
    return _guard(observation.report, settings)


def _check_startable(command: list[str]) -> None:
    """Refuse, before a run folder is made, a command that cannot start (a failed start leaves nothing behind)."""
    import shutil

    program = command[0]
    found = shutil.which(program) if os.sep not in program else program
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        reason = "not found on PATH" if found is None else "not an executable file"
        _fail(f"cannot start {program!r}: {reason}; check the command after --")


def _scenario(settings: Settings, policy, watch, detail: str):
    """The embedded scenario of the settings, its imports (torch, the kernel library) under the progress display
    too."""
    if watch is not None:
        watch.phase("importing torch and the kernel library")
    from mlacheck.scenario.parts import run_scenario
    from mlacheck.scenario.setup import CheckOptions

    options = CheckOptions(**settings.scenario(), library_warnings_shown=detail == "verbose")
    return _guard(lambda: run_scenario(options, policy, watch), settings)


@app.command(cls=_Command, short_help="Re-render saved runs (merged) or a saved JSON report.")
@_settings_command(
    *REPORT, arguments=(SOURCES,), help={"rules": "Rules to analyse with (default: those saved in the run folders)."}
)
def report(ctx: typer.Context, **values: object) -> None:
    """Re-render and merge saved program-mode runs, or re-render a saved JSON report."""
    from mlacheck.program.observation import Observation
    from mlacheck.program.session import ProgramOptions

    detail = _detail(values["quiet"], values["verbose"])
    settings, specs, policy = _inputs(_given(ctx, values))
    options = ProgramOptions(rules=settings["rules"], context=settings.context())
    observation = Observation.saved(values["sources"], options, policy)
    _finish(_guard(observation.report, settings), specs, detail, settings=settings)


@app.command(cls=_Command, short_help="Write the variants a run dispatched as a warm-up manifest.")
def manifest(
    sources: Annotated[
        list[Path],
        typer.Argument(metavar="SOURCE", help="Run folders of a program-mode run, or one JSON report (--json)."),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", metavar="PATH", help="Where to write the warm-up manifest (JSON; json:PATH too)."
        ),
    ],
    rules: Annotated[
        Path | None, _option("rules", "Rules (default: the run folders' saved rules, else the bundled rules).")
    ] = None,
) -> None:
    """Write the variants a run dispatched as a warm-up manifest that a backend can precompile from."""
    output = _guard(lambda: _manifest_path(str(output)))
    from mlacheck.program.observation import Observation
    from mlacheck.program.session import ProgramOptions
    from mlacheck.report.manifest import manifest as make_manifest
    from mlacheck.report.manifest import write_manifest
    from mlacheck.report.policy import ReportPolicy
    from mlacheck.rulefiles import load_rules

    def build() -> dict:
        observation = Observation.saved(sources, ProgramOptions(rules=rules), ReportPolicy(allow_incomplete=True))
        saved = observation.report()
        rule_path = rules if rules is not None else (sources[0] / "rules" if sources[0].is_dir() else None)
        return make_manifest(saved, load_rules(rule_path))

    data = _guard(build)
    _guard(lambda: write_manifest(data, output))
    count = sum(len(family["variants"]) for family in data["families"])
    consoles.console().print(f"mlacheck: wrote {count} dispatched variant(s) to {output}", markup=False)


@app.command("rules", cls=_Command, short_help="List the finding codes and the rule files' kernel families.")
def list_rules(
    rules: Annotated[Path | None, _option("rules")] = None,
    fingerprints: Annotated[
        bool, typer.Option(help="Also print the fingerprint of each family's key functions as installed.")
    ] = False,
    template: Annotated[
        str | None,
        typer.Option(
            metavar="MODULE", help="Print a starting rule for MODULE's installed code (a fork, a new release)."
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every key field and path whole.")] = False,
    code: Annotated[str | None, typer.Argument(hidden=True)] = None,
) -> None:
    """List the finding codes and the kernel families the rule files declare."""
    if code is not None:  # (a code's page is `mlacheck rule`'s: said, not a parser's "unexpected argument")
        _fail(f"mlacheck rules takes no code; a code's page: mlacheck rule {code}")
    if template is not None:
        from mlacheck.commands.rule_template import template as make_template
        from mlacheck.rulefiles import load_rules

        sys.stdout.write(_guard(lambda: make_template(load_rules(rules), template)))
        return
    from mlacheck.commands.rules_table import print_rules

    _guard(lambda: print_rules(consoles.console(), rules, fingerprints, verbose))


@app.command("rule", cls=_Command, short_help="Explain a finding code: what, why, an example, the fix.")
def rule(
    code: Annotated[
        str | None, typer.Argument(metavar="CODE", help="A finding code (MLA001) or its name (serving-path-compile).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="The page of every finding code.")] = False,
) -> None:
    """Explain a finding code: what it finds, why it matters, an example, how to fix it, how to silence it."""
    from mlacheck.commands.rule_page import pages, wrapped

    console = consoles.console()
    text = _guard(lambda: pages(code, every))
    text = wrapped(text, console.width) if console.is_terminal else text  # (a pipe gets the Markdown as written)
    console.print(text, markup=False, highlight=False, soft_wrap=True, end="")


@app.command("env", cls=_Command, short_help="Print what a process the run did not start needs to join it.")
def env(
    run_dir: Annotated[
        Path | None,
        _option("run_dir", "The run folder (default: $MLACHECK_RUN_DIR, set inside `mlacheck run -- ...`)."),
    ] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Print a Ray runtime_env (JSON) instead of shell lines.")] = False,
) -> None:
    """Print what a process that the run did not start needs in its environment to be observed in it: a Ray cluster
    started outside the run (its nodes' environment, or the job's runtime_env). mlacheck must be installed in that
    process's Python (its .pth starts the agent)."""
    import json
    import shlex

    from mlacheck.program.session import worker_environment

    given = run_dir if run_dir is not None else os.environ.get("MLACHECK_RUN_DIR")
    if given and Path(given).exists() and not Path(given).is_dir():
        where = "--run-dir" if run_dir is not None else "MLACHECK_RUN_DIR="
        _fail(
            f"{where}{'' if run_dir is None else ' '}{given}: is a file; give the run folder of the mlacheck run the workers belong to"
        )
    variables, note = _guard(lambda: worker_environment(run_dir))
    if note:
        consoles.console(stderr=True).print(f"mlacheck: note: {printable(note)}", markup=False, soft_wrap=True)
    if ray:
        sys.stdout.write(json.dumps({"env_vars": variables}) + "\n")
    else:
        sys.stdout.write("".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items()))


@app.command(cls=_Command)
def version() -> None:
    """Print mlacheck's version."""
    consoles.console().print(f"mlacheck {__version__}", markup=False)


def _manifest_path(spec: str) -> Path:
    """The manifest's path: PATH, or json:PATH as --output takes it elsewhere (another format is refused)."""
    from mlacheck.report.formats import FORMATS

    fmt, sep, path = spec.partition(":")
    if sep and fmt in FORMATS:
        if fmt != "json" or not path:
            raise MlacheckError(f"--output {spec}: a manifest is JSON; give PATH or json:PATH")
        return Path(path)
    return Path(spec)


def _detail(quiet: bool, verbose: bool) -> str:
    if quiet and verbose:
        _fail("--quiet and --verbose: give one of them")
    return "quiet" if quiet else "verbose" if verbose else "normal"


def _finish(
    report,
    specs: list[tuple[str, Path | None]],
    detail: str = "normal",
    refused: str | None = None,
    settings: Settings | None = None,
) -> None:
    """Print the report (to stderr when a document goes to stdout), write the documents, exit with the report's code;
    with `refused` (a setting that the run could not honour), that line and exit code 2 once the report is out."""
    from mlacheck.report.formats import write_outputs
    from mlacheck.report.model import dumped
    from mlacheck.report.terminal import render

    data, code = dumped(report), report.exit_code  # the JSON form every format renders, made once
    del report  # (the model's room goes to the documents)
    console = consoles.console(stderr=any(path is None for _, path in specs))
    _guard(lambda: write_outputs(data, specs, meanwhile=lambda: render(data, console, detail), may_fork=True), settings)
    if refused is not None:
        _fail(refused)
    raise typer.Exit(code)


def _given(ctx: typer.Context, values: dict[str, object]) -> dict[str, object]:
    """The settings given on the command line (or through the environment), by name."""
    sources = ("COMMANDLINE", "ENVIRONMENT")
    return {name: value for name, value in values.items() if name in SETTINGS and _source(ctx, name) in sources}


def _source(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name


def _inputs(given: dict[str, object]) -> tuple[Settings, list, object]:
    """The settings (the command line's over [tool.mlacheck]: mlacheck/config.py states the precedence), the outputs
    and the verdict policy, checked before anything runs; an error names a setting where the user wrote it."""
    from mlacheck.report.formats import output_specs
    from mlacheck.report.policy import ReportPolicy

    settings = _guard(lambda: Settings("cli", given).read())

    def checked() -> tuple[list, ReportPolicy]:
        settings.check()
        specs = output_specs(settings.outputs())
        settings.context()
        return specs, ReportPolicy.of(**settings.policy())

    specs, policy = _guard(checked, settings)
    return settings, specs, policy


def _guard(action, settings: Settings | None = None):
    """Run a library call; its MlacheckError becomes one line on stderr (naming a setting as `settings` says the user
    wrote it) and exit code 2."""
    try:
        return action()
    except MlacheckError as exc:
        _fail(exc.line() if settings is None else settings.line(exc))


def _fail(message: str) -> None:
    consoles.console(stderr=True).print(f"mlacheck: error: {printable(message)}", markup=False, soft_wrap=True)
    raise typer.Exit(MlacheckError.exit_code)


def _bug_line(exc: BaseException) -> str:
    """`Type: message (at file:line)`, the line being the innermost frame in mlacheck's own code."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/mlacheck/" in f.filename.replace("\\", "/")]
    where = f" (at {frames[-1].filename.rpartition('/mlacheck/')[2]}:{frames[-1].lineno})" if frames else ""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}{where}"


def main() -> None:
    """The `mlacheck` entry point. A short-lived process: collections during the imports are put off (the heap is
    frozen after them), and the interpreter's teardown is skipped once the output is flushed."""
    gc.disable()
    code = 0
    try:
        result = app(standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except Exception as exc:  # noqa: BLE001 - typer's usage errors; anything else is a bug shown as one line too
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `mlacheck`: the help is the answer, not an error
            sys.stdout.write(exc.format_message() + "\n")
            code = 0
        elif hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2:
            consoles.console(stderr=True).print(
                f"mlacheck: error: {printable(exc.format_message())} (see mlacheck --help)",
                markup=False,
                soft_wrap=True,
            )
            code = 2
        elif type(exc).__name__ == "Abort":
            code = 130
        else:
            consoles.console(stderr=True).print(
                f"mlacheck: internal error: {printable(_bug_line(exc))}; this is a bug in mlacheck, please "
                "report it with this line",
                markup=False,
                soft_wrap=True,
            )
            code = 2
    except KeyboardInterrupt:
        code = 130
    flush_standard_streams()
    os._exit(code)
