"""The command line: parse, call the library, print. Exit 0 clean, 1 findings, 2 bad input or environment."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from mlacheck import __version__
from mlacheck.errors import MlacheckError

app = typer.Typer(
    help="Checks that a serving engine's kernel warm-up covers what its runtime dispatches.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)


JsonOption = Annotated[Optional[Path], typer.Option("--json", help="Also write the JSON report here.")]
StrictOption = Annotated[bool, typer.Option(help="Warnings fail the run too.")]
OutputOption = Annotated[Optional[list[str]], typer.Option(
    help="FORMAT:PATH (json, junit, sarif, github, markdown; PATH - is stdout); repeatable.")]
BaselineOption = Annotated[Optional[Path], typer.Option(
    help="A saved JSON report or baseline: its findings show as known and do not fail.")]


class Profile(str, Enum):
    tokenspeed = "tokenspeed"
    sglang = "sglang"


class CompilePolicy(str, Enum):
    real = "real"
    skip = "skip"


@app.command()
def run(
    model: Annotated[str, typer.Option(help="Model preset: deepseek-v3 or kimi-k2.")] = "deepseek-v3",
    tp: Annotated[int, typer.Option(help="Tensor-parallel size: divides the model's heads.")] = 1,
    profile: Annotated[Profile, typer.Option(help="Traffic pattern: whose prefill calls to replay.")] = Profile.tokenspeed,
    warmup: Annotated[str, typer.Option(help="Compile path under test: library, none, PATH.py:FUNC or pkg.module:FUNC.")] = "library",
    arch: Annotated[str, typer.Option(help="Target arch: auto, sm_100a, sm_103a or sm_107a.")] = "auto",
    compile: Annotated[CompilePolicy, typer.Option("--compile", help="real: cute.compile and time every variant; skip: record keys only.")] = CompilePolicy.real,
    rules: Annotated[Optional[Path], typer.Option(help="A rule file or folder that replaces the bundled rules.")] = None,
    requests: Annotated[int, typer.Option(help="Requests in the seeded workload.")] = 8,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
    json_path: JsonOption = None,
    trace: Annotated[Optional[Path], typer.Option(help="Also write the event trace (JSONL) here.")] = None,
    strict: StrictOption = False,
    output: OutputOption = None,
    baseline: BaselineOption = None,
    run_dir: Annotated[Optional[Path], typer.Option(help="Program mode: the run folder (default mlacheck-runs/<time>-<pid>).")] = None,
    command: Annotated[Optional[list[str]], typer.Argument(help="Program mode: after --, a command to run and observe.")] = None,
) -> None:
    """Run the embedded scenario (warm-up, then traffic through tokenspeed_mla's dispatch), or with
    `-- COMMAND`, run a program and observe every Python process it starts; report mismatches."""
    if command:
        from mlacheck.program.runner import run_program
        from mlacheck.program.runs import program_result

        run = _guard(lambda: run_program(command, run_dir, rules, compile.value))
        errors.print(f"mlacheck: run folder {run.path}", markup=False, highlight=False)
        _finish(_guard(lambda: program_result([run.path], rules, strict)), json_path, output, baseline)
    from mlacheck.check import CheckOptions, run_check

    options = CheckOptions(model, tp, profile.value, warmup, arch, compile.value, rules, trace, requests, seed)
    _finish(_guard(lambda: run_check(options, strict)), json_path, output, baseline)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders of program-mode runs (e.g. one per node).")],
    rules: Annotated[Optional[Path], typer.Option(help="Rules to analyse with (default: those saved in the first run folder).")] = None,
    json_path: JsonOption = None,
    strict: StrictOption = False,
    output: OutputOption = None,
    baseline: BaselineOption = None,
) -> None:
    """Re-render and merge saved program-mode runs (e.g. one per node of a multi-node job)."""
    from mlacheck.program.runs import program_result

    _finish(_guard(lambda: program_result(run_dirs, rules, strict)), json_path, output, baseline)


@app.command()
def manifest(
    source: Annotated[list[Path], typer.Argument(help="Run folders of a program-mode run, or one JSON report (--json).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the warm-up manifest (JSON).")],
    rules: Annotated[Optional[Path], typer.Option(help="Rules (default: a run folder's saved rules, else the bundled rules).")] = None,
) -> None:
    """Write the variants a run dispatched as a warm-up manifest that a backend can precompile from."""
    from mlacheck.manifest import load_report, manifest as make_manifest, write_manifest
    from mlacheck.program.runs import program_result
    from mlacheck.report.json_report import report_dict
    from mlacheck.rules import load_rules

    def build() -> dict:
        if len(source) == 1 and source[0].is_file():
            return make_manifest(load_report(source[0]), load_rules(rules))
        result = program_result(source, rules)
        saved = source[0] / "rules"
        return make_manifest(report_dict(result), load_rules(rules if rules is not None else saved))

    data = _guard(build)
    _guard(lambda: write_manifest(data, output))
    count = sum(len(family["variants"]) for family in data["families"])
    console.print(f"mlacheck: wrote {count} dispatched variant(s) to {output}")


def _finish(result, json_path: Optional[Path], outputs: Optional[list[str]], baseline: Optional[Path]) -> None:
    """Print the report, write the requested files, exit: 1 on new failing findings, else the program's status."""
    from mlacheck.report.baseline import apply_baseline, load_baseline
    from mlacheck.report.formats import parse_output, write_outputs
    from mlacheck.report.json_report import report_dict
    from mlacheck.report.terminal import render

    specs = [*(outputs or []), *([f"json:{json_path}"] if json_path is not None else [])]
    for spec in specs:
        _guard(lambda: parse_output(spec))
    report = report_dict(result)
    if baseline is not None:
        report = _guard(lambda: apply_baseline(report, load_baseline(baseline), str(baseline)))
    render(result, console, report)
    _guard(lambda: write_outputs(report, specs))
    raise typer.Exit(result.exit_code_for(report["verdict"]))


@app.command("rules")
def list_rules(
    rules: Annotated[Optional[Path], typer.Option(help="A rule file or folder instead of the bundled rules.")] = None,
) -> None:
    """List the finding codes and the kernel families the rule files declare."""
    from mlacheck.registry import RULES
    from mlacheck.rules import load_rules

    codes = Table(title="Finding codes", title_justify="left", header_style="bold")
    for column in ("code", "name", "severity", "what", "fix"):
        codes.add_column(column)
    for rule in RULES.values():
        codes.add_row(rule.code, rule.name, rule.severity.value, rule.summary, rule.hint)
    console.print(codes)
    families = Table(title="Kernel families", title_justify="left", header_style="bold")
    for column in ("family", "cache", "key fields", "checked against", "contracts", "file"):
        families.add_column(column)
    for rule in _guard(lambda: load_rules(rules)):
        family = rule.family
        families.add_row(family.name, f"{family.module}.{family.cache}", ", ".join(family.key_fields),
                         f"{family.distribution} {family.checked_versions}", str(len(rule.contract)), rule.source)
    console.print(families)


@app.command()
def version() -> None:
    """Print mlacheck's version."""
    console.print(f"mlacheck {__version__}")


def _guard(action):
    """Run a library call; its MlacheckError becomes one line on stderr and exit code 2."""
    try:
        return action()
    except MlacheckError as exc:
        errors.print(f"mlacheck: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(MlacheckError.exit_code) from None


def main() -> None:
    app()
