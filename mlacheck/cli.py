"""The command line: parse, call the library, print. Exit 0 clean, 1 findings, 2 bad input, environment or an
incomplete check; with `-- COMMAND`, otherwise the program's own status.

Every error is one line on stderr (`mlacheck: error: ...`), typer's usage errors included; nothing a user
wrote is read as rich markup.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
import typer.core
from rich.console import Console

from mlacheck import __version__
from mlacheck.errors import MlacheckError
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


MAX_SMS = 1024  # more than any GPU has (a B200 has 148): a larger --num-sms is a typo, not a target
LOG_WIDTH = 120
"""The report's width where it goes to a CI log or a file (no terminal, no COLUMNS): logs are read wide."""


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, emoji=False, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = LOG_WIDTH
    return console


JsonOption = Annotated[str | None, typer.Option("--json", metavar="PATH", help="Also write the JSON report here.")]
StrictOption = Annotated[bool, typer.Option(help="Warnings fail the run too.")]
OutputOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="FORMAT:PATH",
        help=f"{OUTPUT_HELP} (the report then goes to stderr); repeatable.",
    ),
]
BaselineOption = Annotated[
    Path | None,
    typer.Option(metavar="PATH", help="A saved JSON report or baseline: its findings show as known and do not fail."),
]
AllowIncompleteOption = Annotated[
    bool,
    typer.Option(
        help="An incomplete check (nothing observed, dispatches that died before their lookup) does not exit 2."
    ),
]
ContextOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="KEY=VALUE",
        help="KEY=VALUE of the run context that contracts read (kv_cache_dtype, d_qk, d_v, num_heads, engine, ...); repeatable.",
    ),
]
RulesOption = Annotated[
    Path | None, typer.Option(metavar="PATH", help="A rule file or folder that replaces the bundled rules.")
]
SelectOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="CODES",
        help="Finding codes that count (MLA001,MLA003; repeatable); the others are listed as ignored and never fail.",
    ),
]
IgnoreOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="CODES", help="Finding codes listed as ignored, never failing (MLA002; comma-separated or repeatable)."
    ),
]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print the findings, the incomplete reasons and the verdict line only; no progress display.",
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Print each finding's whole message, key and stack, and every shared key field."
    ),
]


Profile = Enum("Profile", {name: name for name in ENGINES}, type=str)  # the engines the scenario replays


class Kernel(str, Enum):
    prefill = "prefill"
    decode = "decode"
    all = "all"


class PrefillBackend(str, Enum):
    tokenspeed_mla = "tokenspeed_mla"
    fa4 = "fa4"


class Switch(str, Enum):
    on = "on"
    off = "off"


class CompilePolicy(str, Enum):
    real = "real"
    skip = "skip"


SCENARIO_ONLY = (
    "model",
    "tp",
    "profile",
    "prefill_backend",
    "warmup",
    "requests",
    "seed",
    "trace",
    "kernel",
    "cuda_graph",
    "cuda_graph_max_bs",
    "max_context_len",
    "batch_sizes",
)
PROGRAM_ONLY = ("run_dir", "dry", "serving_start")


def _version_callback(value: bool) -> None:
    if value:
        _console().print(f"mlacheck {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print mlacheck's version and exit."),
    ] = False,
) -> None:
    """Checks that a serving engine's kernel warm-up covers what its runtime dispatches."""


@app.command(cls=_Command)
def run(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(metavar="NAME", help="Model preset: deepseek-v3 or kimi-k2.")] = "deepseek-v3",
    tp: Annotated[int, typer.Option(metavar="N", help="Tensor-parallel size: divides the model's heads.")] = 1,
    profile: Annotated[Profile, typer.Option(help="The engine whose start-up and traffic to replay.")] = Profile(
        "tokenspeed"
    ),
    kernel: Annotated[Kernel, typer.Option(help="The kernel families to check.")] = Kernel.all,
    prefill_backend: Annotated[
        PrefillBackend | None,
        typer.Option(help="The prefill kernel (default: the profile's own)."),
    ] = None,
    warmup: Annotated[
        str,
        typer.Option(
            metavar="SOURCE",
            help="Prefill compile path under test: engine (the profile's own), library, none, PATH.py:FUNC or pkg.module:FUNC.",
        ),
    ] = "engine",
    cuda_graph: Annotated[
        Switch,
        typer.Option(help="off: the engine's enforce-eager / disable-cuda-graph start-up; decode then runs eagerly."),
    ] = Switch.on,
    cuda_graph_max_bs: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="The largest captured decode batch (default: the engine's); larger batches decode eagerly.",
        ),
    ] = None,
    max_context_len: Annotated[
        int | None, typer.Option(metavar="TOKENS", help="The context length (default: the model's).")
    ] = None,
    batch_sizes: Annotated[
        str | None, typer.Option(metavar="SIZES", help="Serving decode batch sizes, e.g. 1,8,64.")
    ] = None,
    arch: Annotated[
        str,
        typer.Option(
            metavar="ARCH", help="Target arch: auto, or one a loaded family has kernels for (sm_90a, sm_100a, ...)."
        ),
    ] = "auto",
    compile: Annotated[
        CompilePolicy,
        typer.Option("--compile", help="real: cute.compile and time every variant; skip: record keys only."),
    ] = CompilePolicy.real,
    rules: RulesOption = None,
    requests: Annotated[int, typer.Option(metavar="N", help="Requests in the seeded workload.")] = 8,
    seed: Annotated[int, typer.Option(metavar="N", help="Workload seed.")] = 0,
    json_path: JsonOption = None,
    trace: Annotated[Path | None, typer.Option(metavar="PATH", help="Also write the event trace (JSONL) here.")] = None,
    strict: StrictOption = False,
    allow_incomplete: AllowIncompleteOption = False,
    context: ContextOption = None,
    output: OutputOption = None,
    baseline: BaselineOption = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(metavar="PATH", help="Program mode: the run folder (default mlacheck-runs/<time>-<pid>)."),
    ] = None,
    dry: Annotated[
        bool,
        typer.Option(
            help="Program mode: the watched dispatches run past their lookup without the target GPU; nothing launches."
        ),
    ] = False,
    serving_start: Annotated[
        list[str] | None,
        typer.Option(
            metavar="MODULE:QUALNAME[@return]",
            help="Program mode: a function whose call (or, with @return, return) marks serving start; repeatable.",
        ),
    ] = None,
    num_sms: Annotated[
        int | None, typer.Option(metavar="N", help="The target GPU's SM count (default: the target arch's flagship).")
    ] = None,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="COMMAND", help="Program mode: after --, a command to run and observe."),
    ] = None,
) -> None:
    """Run the embedded scenario (warm-up, then traffic through the kernels' own dispatch), or with
    `-- COMMAND`, run a program and observe every Python process it starts; report mismatches."""
    given = {name for name in ctx.params if ctx.get_parameter_source(name).name in ("COMMANDLINE", "ENVIRONMENT")}
    refused = sorted(given & set(SCENARIO_ONLY if command else PROGRAM_ONLY))
    if refused:
        where = "a program (-- COMMAND)" if command else "the embedded scenario (they need -- COMMAND)"
        _fail(f"{', '.join('--' + name.replace('_', '-') for name in refused)}: does not apply to {where}")
    if num_sms is not None and num_sms > MAX_SMS:
        _fail(
            f"--num-sms {num_sms}: more SMs than any GPU has (148 on a B200, 132 on an H200); give the target's count"
        )
    inputs = _inputs(ctx)
    specs, parsed_context, policy, rules = inputs.specs, inputs.context, inputs.policy, inputs.rules
    detail = _detail(quiet, verbose)
    if trace is not None:
        from mlacheck.report.formats import check_writable

        _guard(lambda: check_writable(trace, f"--trace {trace}"))  # before the run: a trace it cannot write loses it
    if command:
        from mlacheck.program.session import ProgramOptions, observe_program

        _check_startable(command)

        options = ProgramOptions(
            run_dir, rules, compile.value, dry, arch, num_sms, tuple(serving_start or ()), parsed_context
        )
        with _progress(detail, live=False) as watch:
            report = _guard(
                lambda: observe_program(
                    command,
                    options,
                    policy,
                    on_start=lambda path: _console(True).print(
                        f"mlacheck: run folder {printable(str(path))}", markup=False, soft_wrap=True
                    ),
                    watch=watch,
                )
            )
    else:
        with _progress(detail, live=True) as watch:
            report = _scenario(ctx, inputs, watch, detail)
        if _given(ctx, "warmup") and report.scenario is not None and report.scenario.get("warmup") is None:
            unused = (
                f"--warmup {warmup}: never called: this run (--profile {_text(profile)}, --kernel {_text(kernel)}) "
                "compiles no prefill kernel, so no prefill warm-up ran and the check above did not test yours; drop "
                "--warmup, or check a profile whose prefill compiles (see --profile in mlacheck run --help)"
            )
            _finish(report, specs, detail, unused)
    _finish(report, specs, detail)


def _check_startable(command: list[str]) -> None:
    """Refuse, before a run folder is made, a command that cannot start (a failed start leaves nothing behind)."""
    import shutil

    program = command[0]
    found = shutil.which(program) if os.sep not in program else program
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        reason = "not found on PATH" if found is None else "not an executable file"
        _fail(f"cannot start {program!r}: {reason}; check the command after --")


def _scenario(ctx: typer.Context, inputs: Inputs, watch, detail: str):
    """The embedded scenario of `run`'s options, its imports (torch, the kernel library) under the progress
    display too."""
    if watch is not None:
        watch.phase("importing torch and the kernel library")
    from mlacheck.scenario.parts import run_scenario
    from mlacheck.scenario.setup import CheckOptions

    configured, option = inputs.config, ctx.params.get
    backend = option("prefill_backend")
    options = CheckOptions(
        model=option("model"),
        tp=option("tp"),
        profile=_setting(ctx, "profile", option("profile"), configured.profile, Profile),
        warmup=option("warmup"),
        arch=option("arch"),
        compile=_text(option("compile")),
        rules=inputs.rules,
        trace=None if option("trace") is None else Path(option("trace")),
        requests=option("requests"),
        seed=option("seed"),
        num_sms=option("num_sms"),
        kernel=_setting(ctx, "kernel", option("kernel"), configured.kernel, Kernel),
        cuda_graph=_text(option("cuda_graph")) == Switch.on.value,
        cuda_graph_max_bs=option("cuda_graph_max_bs"),
        max_context_len=option("max_context_len"),
        batch_sizes=option("batch_sizes"),
        context=inputs.context,
        prefill_backend=_text(backend) if backend else None,
        library_warnings_shown=detail == "verbose",
    )
    return _guard(lambda: run_scenario(options, inputs.policy, watch))


@app.command(cls=_Command)
def report(
    ctx: typer.Context,
    sources: Annotated[
        list[Path],
        typer.Argument(
            metavar="SOURCE", help="Run folders of program-mode runs (e.g. one per node), or one saved JSON report."
        ),
    ],
    rules: Annotated[
        Path | None,
        typer.Option(metavar="PATH", help="Rules to analyse with (default: those saved in the run folders)."),
    ] = None,
    json_path: JsonOption = None,
    strict: StrictOption = False,
    allow_incomplete: AllowIncompleteOption = False,
    context: ContextOption = None,
    output: OutputOption = None,
    baseline: BaselineOption = None,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Re-render and merge saved program-mode runs, or re-render a saved JSON report."""
    from mlacheck.program.saved import report_from_sources

    inputs = _inputs(ctx)
    _finish(
        _guard(lambda: report_from_sources(sources, inputs.rules, inputs.context, inputs.policy)),
        inputs.specs,
        _detail(quiet, verbose),
    )


@app.command(cls=_Command)
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
        Path | None,
        typer.Option(metavar="PATH", help="Rules (default: the run folders' saved rules, else the bundled rules)."),
    ] = None,
) -> None:
    """Write the variants a run dispatched as a warm-up manifest that a backend can precompile from."""
    output = _guard(lambda: _manifest_path(str(output)))
    from mlacheck.program.saved import report_from_sources
    from mlacheck.report.manifest import manifest as make_manifest
    from mlacheck.report.manifest import write_manifest
    from mlacheck.report.model import ReportPolicy
    from mlacheck.rulefiles import load_rules

    def build() -> dict:
        saved = report_from_sources(sources, rules, policy=ReportPolicy(allow_incomplete=True))
        rule_path = rules if rules is not None else (sources[0] / "rules" if sources[0].is_dir() else None)
        return make_manifest(saved, load_rules(rule_path))

    data = _guard(build)
    _guard(lambda: write_manifest(data, output))
    count = sum(len(family["variants"]) for family in data["families"])
    _console().print(f"mlacheck: wrote {count} dispatched variant(s) to {output}", markup=False)


@app.command("rules", cls=_Command)
def list_rules(
    rules: RulesOption = None,
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
) -> None:
    """List the finding codes and the kernel families the rule files declare."""
    if template is not None:
        from mlacheck.commands.rule_template import template as make_template
        from mlacheck.rulefiles import load_rules

        sys.stdout.write(_guard(lambda: make_template(load_rules(rules), template)))
        return
    from mlacheck.commands.rules_table import print_rules

    _guard(lambda: print_rules(_console(), rules, fingerprints, verbose))


@app.command("rule", cls=_Command)
def rule(
    code: Annotated[
        str | None, typer.Argument(metavar="CODE", help="A finding code (MLA001) or its name (serving-path-compile).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="The page of every finding code.")] = False,
) -> None:
    """Explain a finding code: what it finds, why it matters, an example, how to fix it, how to silence it."""
    from mlacheck.commands.rule_page import pages

    _console().print(_guard(lambda: pages(code, every)), markup=False, highlight=False, soft_wrap=True, end="")


@app.command("env", cls=_Command)
def env(
    run_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH", help="The run folder (default: $MLACHECK_RUN_DIR, set inside `mlacheck run -- ...`)."
        ),
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
        _console(stderr=True).print(f"mlacheck: note: {printable(note)}", markup=False, soft_wrap=True)
    if ray:
        sys.stdout.write(json.dumps({"env_vars": variables}) + "\n")
    else:
        sys.stdout.write("".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items()))


@app.command(cls=_Command)
def version() -> None:
    """Print mlacheck's version."""
    _console().print(f"mlacheck {__version__}", markup=False)


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        pass


def _progress(detail: str, live: bool):
    """The progress display on stderr (a live one for the scenario, log lines for a program's run), only where
    stderr is a terminal and not with --quiet."""
    console = _console(stderr=True)
    if detail == "quiet" or not console.is_terminal:
        return _NoProgress()
    from mlacheck.commands.progress import LiveProgress, LogProgress

    return LiveProgress(console) if live else LogProgress(console)


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


def _finish(report, specs: list[tuple[str, Path | None]], detail: str = "normal", refused: str | None = None) -> None:
    """Print the report (to stderr when a document goes to stdout), write the documents, exit with the report's code;
    with `refused` (a setting that the run could not honour), that line and exit code 2 once the report is out."""
    from mlacheck.report.formats import write_outputs
    from mlacheck.report.terminal import render

    render(report, _console(stderr=any(path is None for _, path in specs)), detail)
    _guard(lambda: write_outputs(report, specs))
    if refused is not None:
        _fail(refused)
    raise typer.Exit(report.exit_code)


@dataclass(frozen=True)
class Inputs:
    """What every reporting command takes from its options and [tool.mlacheck], checked before anything runs."""

    specs: list
    context: dict[str, str]
    policy: object
    rules: Path | None
    config: object


def _given(ctx: typer.Context, name: str) -> bool:
    return ctx.get_parameter_source(name).name in ("COMMANDLINE", "ENVIRONMENT")


def _inputs(ctx: typer.Context) -> Inputs:
    """The outputs, the run context, the verdict policy and the rules: each option given on the command line over
    the pyproject.toml's [tool.mlacheck] setting (mlacheck/config.py states the precedence). An error names each
    setting where the user wrote it: the flag, or the file's key."""
    from mlacheck.config import load_config, named
    from mlacheck.context import parse_context
    from mlacheck.report.formats import output_specs
    from mlacheck.report.model import ReportPolicy

    config, pyproject = _guard(load_config)
    params = ctx.params

    def from_file(name: str, configured: object) -> bool:
        """Whether the file's value is used: the command line did not give it (typer gives [] for a list option that
        was not) and the file did."""
        return not _given(ctx, name) and configured is not None

    def pick(name: str, configured: object) -> object:
        return configured if from_file(name, configured) else params[name]

    def name(option: str, configured: object) -> str:
        return named(option, pyproject) if from_file(option, configured) else f"--{option}"

    outputs = [(spec, f"{name('output', config.output)} {spec}") for spec in pick("output", config.output) or []]
    json_path = params.get("json_path")
    if json_path is not None:
        if not json_path.strip():
            _fail("--json: give a file path (it was given empty)")
        outputs.append((f"json:{json_path}", f"--json {json_path}"))
    specs = _guard(lambda: output_specs(outputs))
    context = {**config.context, **_guard(lambda: parse_context(params.get("context")))}
    selected = _given(ctx, "select") or config.select is not None
    policy = _guard(
        lambda: ReportPolicy.of(
            bool(pick("strict", config.strict)),
            params.get("allow_incomplete", False),
            pick("baseline", config.baseline),
            pick("select", config.select) if selected else None,
            pick("ignore", config.ignore),
            {option: name(option, getattr(config, option)) for option in ("baseline", "select", "ignore")},
        )
    )
    rules = pick("rules", config.rules)
    if rules is not None and from_file("rules", config.rules) and not Path(rules).exists():
        _fail(f"{named('rules', pyproject)} = {str(config.rules)!r}: no such rule file or folder; fix the path")
    return Inputs(specs, context, policy, None if rules is None else Path(rules), config)


def _text(choice: Enum | str) -> str:
    """A choice's text: `ctx.params` holds the Enum member under some typer releases, click's string under others."""
    return choice.value if isinstance(choice, Enum) else choice


def _setting(ctx: typer.Context, name: str, value: Enum, configured: str | None, kind: type[Enum]) -> str:
    """A choice given on the command line, else [tool.mlacheck]'s (checked against the choices), else the default."""
    if _given(ctx, name) or configured is None:
        return _text(value)
    try:
        return kind(configured).value
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        _fail(f"pyproject.toml [tool.mlacheck] {name} = {configured!r}: choose one of {choices}")


def _guard(action):
    """Run a library call; its MlacheckError becomes one line on stderr and exit code 2."""
    try:
        return action()
    except MlacheckError as exc:
        _fail(str(exc))


def _fail(message: str) -> None:
    _console(stderr=True).print(f"mlacheck: error: {printable(message)}", markup=False, soft_wrap=True)
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
            _console(stderr=True).print(
                f"mlacheck: error: {printable(exc.format_message())} (see mlacheck --help)",
                markup=False,
                soft_wrap=True,
            )
            code = 2
        elif type(exc).__name__ == "Abort":
            code = 130
        else:
            _console(stderr=True).print(
                f"mlacheck: internal error: {printable(_bug_line(exc))}; this is a bug in mlacheck, please "
                "report it with this line",
                markup=False,
                soft_wrap=True,
            )
            code = 2
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
