"""Program mode end to end: a run folder, the program run under observation, and its report."""

from __future__ import annotations

import gc
import os
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mlacheck import arch, qualnames
from mlacheck.analysis.context_check import check_context
from mlacheck.capture.caches import check_rules
from mlacheck.capture.policy import CapturePolicy
from mlacheck.errors import MlacheckError
from mlacheck.program.follow import TraceFollower
from mlacheck.program.layout import CAPTURE_CONFIG, ENV_PREFIX, ENV_RUN_DIR
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.saved import program_report
from mlacheck.program.supervisor import run_program
from mlacheck.program.trust import check_folder
from mlacheck.report.model import Report, ReportPolicy
from mlacheck.rulefiles import RuleSet, load_rules


@dataclass(frozen=True)
class ProgramOptions:
    """What program mode is asked to do (`mlacheck run -- COMMAND`, `pytest --mlacheck`)."""

    run_dir: Path | None = None
    rules: Path | None = None
    compile: str = "real"  # "real" or "skip"
    dry: bool = False
    arch: str = "auto"
    num_sms: int | None = None
    serving_start: tuple[str, ...] = ()  # MODULE:QUALNAME[@return]
    context: dict[str, str] | None = None


@dataclass(frozen=True)
class PreparedRun:
    """A new run folder holding the rules and what capture does, and the environment the program needs on top of
    the caller's."""

    folder: RunFolder
    rules: RuleSet
    capture_config: dict
    environment: dict[str, str]


def prepare_run(options: ProgramOptions) -> PreparedRun:
    """Check the options against the rules, then make the run folder."""
    for item in options.serving_start:
        if qualnames.serving_start(item) is None:
            raise MlacheckError(f"--serving-start {item}: write MODULE:QUALNAME or MODULE:QUALNAME@return")
    if options.num_sms is not None and options.num_sms < 1:
        raise MlacheckError(f"--num-sms {options.num_sms}: an SM count is a positive number (148 on a B200)")
    rules = load_rules(options.rules)
    check_rules(rules)
    check_context(options.context, rules)
    if options.arch != "auto" and options.arch not in rules.arches:
        raise MlacheckError(
            f"--arch {options.arch}: no loaded family has kernels for it; choose auto or one of "
            f"{', '.join(rules.arches)}"
        )
    declared = next((os.environ[name] for name in rules.arch_env if os.environ.get(name)), None)
    target = options.arch if options.arch != "auto" else declared or arch.DEFAULT_ARCH
    policy = CapturePolicy(
        compile=options.compile,
        replace_launch=options.dry,
        dry=options.dry,
        target_arch=target,
        num_sms=options.num_sms or arch.flagship(target).sms,
    )
    folder = RunFolder.create(options.run_dir)
    environment = {}
    if options.dry:  # what the families read the target from, where the program does not say it itself
        environment = {name: target for name in rules.arch_env if name not in os.environ}
        environment.update({name: str(policy.num_sms) for name in rules.sm_count_env if name not in os.environ})
    read_by_families = {*rules.arch_env, *rules.sm_count_env}
    for name in rules.copy_prefixes_env:  # engines that copy variables to their workers copy mlacheck's too
        prefixes = [prefix.strip() for prefix in os.environ.get(name, "").split(",") if prefix.strip()]
        if ENV_PREFIX not in prefixes:
            environment[name] = ",".join([*prefixes, ENV_PREFIX])
    config = {
        **rules.capture_config(),
        "policy": asdict(policy),
        "host": os.uname().nodename,
        # what a process that did not inherit the program's environment (found through the registry) still needs
        "environment": {name: value for name, value in environment.items() if name in read_by_families},
    }
    config["serving_starts"] += [
        {"function": f"{module}:{qualname}", "at": at}
        for module, qualname, at in map(qualnames.serving_start, options.serving_start)
    ]
    folder.save([file.source for file in rules.files], config)
    return PreparedRun(folder, rules, config, environment)


def observe_program(
    command: list[str],
    options: ProgramOptions,
    policy: ReportPolicy = ReportPolicy(),
    on_start: Callable[[Path], None] | None = None,
    watch=None,
) -> Report:
    """Run `command` observed, into a new run folder, and analyse it with the rules it was recorded under.
    `watch` (a progress display: `phase(name)`, `event(event)`) follows the traces as the program writes them."""
    run = prepare_run(options)
    if on_start is not None:
        on_start(run.folder.path)
    gc.enable()  # the CLI runs with collections off; this process now waits on the program for as long as it runs
    on_tick = None
    if watch is not None:
        watch.phase(f"running {shlex.join(command)}")
        follower = TraceFollower(run.folder.path)
        on_tick = lambda: [watch.event(event) for event in follower.poll()]
    supervised = run_program(command, run.folder, extra_environment=run.environment, on_tick=on_tick)
    if on_tick is not None:
        on_tick()
        watch.phase("analysing the run folder")
    supervised.meta.update(compile_policy=options.compile, dry=options.dry)
    try:
        run.folder.write_meta(supervised.meta)
    except MlacheckError as exc:  # the folder vanished or is full: the report says so, from what is left
        supervised.problems.append(str(exc))
    try:
        return program_report([run.folder.path], run.rules, options.context, policy, supervised)
    except MlacheckError as exc:  # e.g. a --context value the run's keys show to be of another kind
        raise MlacheckError(f"{exc}; the run is kept: mlacheck report {run.folder.path} reports it again") from None


def worker_environment(run_dir: Path | None) -> tuple[dict[str, str], str | None]:
    """The variables that make a process the run did not start belong to it (a worker of a Ray cluster started
    outside the run), and a note where `run_dir` is not a run folder yet."""
    given = str(run_dir) if run_dir is not None else os.environ.get(ENV_RUN_DIR)
    if not given:
        raise MlacheckError(
            f"no run: give --run-dir (the one of the `mlacheck run` the workers belong to), or run this inside `mlacheck run -- ...` ({ENV_RUN_DIR} is not set)"
        )
    path = Path(given).resolve()
    note = None
    if path.exists() and not path.is_dir():
        raise MlacheckError(f"--run-dir {path}: is a file; give the run folder of the `mlacheck run` the workers join")
    if path.exists():
        check_folder(path)  # the workers would refuse it: say so now
    if not path.exists() or not (path / CAPTURE_CONFIG).is_file():
        note = f"{path} is not a run folder yet: `mlacheck run --run-dir {path} -- ...` makes it; start it before the workers"
    return {ENV_RUN_DIR: str(path)}, note
