"""Program mode's options, and a run folder made for them (`prepare_run`: Observation.prepare); what a process the run
did not start needs to join it (`worker_environment`)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from mlacheck import arch, qualnames
from mlacheck.capture import installed
from mlacheck.capture.caches import check_rules
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.watch import ask_ahead
from mlacheck.errors import SETTING, MlacheckError, about
from mlacheck.program.layout import CAPTURE_CONFIG, ENV_PREFIX, ENV_RUN_DIR, installed_path
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.trust import check_folder
from mlacheck.rulefiles import RuleSet, load_rules


@dataclass(frozen=True, kw_only=True)
class ProgramOptions:
    """What program mode is asked to do (`mlacheck run -- COMMAND`, `pytest --mlacheck`, `mlacheck report`)."""

    run_dir: Path | None = None
    rules: Path | None = None
    compile: str = "real"  # "real" or "skip"
    dry: bool = False
    arch: str = "auto"
    num_sms: int | None = None
    serving_start: tuple[str, ...] = ()  # MODULE:QUALNAME[@return]
    step: tuple[str, ...] = ()  # MODULE:QUALNAME of an engine's step function
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
    rules, target = _checked(options)
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
        "policy": policy._asdict(),
        "host": os.uname().nodename,
        # what a process that did not inherit the program's environment (found through the registry) still needs
        "environment": {name: value for name, value in environment.items() if name in read_by_families},
    }
    config["serving_starts"] += [
        {"function": f"{module}:{qualname}", "at": at}
        for module, qualname, at in map(qualnames.serving_start, options.serving_start)
    ]
    config["steps"] += [{"function": item} for item in options.step]
    folder.save([file.source for file in rules.files], config)
    _ask_ahead(str(folder.path), config)
    return PreparedRun(folder, rules, config, environment)


def _ask_ahead(run_dir: str, config: dict) -> None:
    """What the program's processes will ask the installed distributions, answered once now (capture/installed.py):
    a burst of workers that import a watched library at once finds the answers ready. Where it fails, each process
    asks for itself."""
    installed.share(functools.partial(installed_path, run_dir))
    try:
        ask_ahead(config)
    except Exception:  # noqa: BLE001 - only time is lost
        pass


def _checked(options: ProgramOptions) -> tuple[RuleSet, str]:
    """The rules, and the target arch, of options checked against them (a bad one: a line naming its setting)."""
    for item in options.serving_start:
        if qualnames.serving_start(item) is None:
            raise MlacheckError(f"{SETTING}: write MODULE:QUALNAME or MODULE:QUALNAME@return", "serving_start", item)
    for item in options.step:
        if qualnames.split(item) is None:
            raise MlacheckError(f"{SETTING}: write MODULE:QUALNAME (the engine's step function)", "step", item)
    if options.num_sms is not None and options.num_sms < 1:
        raise MlacheckError(f"{SETTING}: an SM count is a positive number (148 on a B200)", "num_sms", options.num_sms)
    rules = load_rules(options.rules)
    check_rules(rules)
    if options.context:  # (the analysis it needs is loaded only then: the program starts sooner)
        from mlacheck.analysis.context_check import check_context

        with about("context"):
            check_context(options.context, rules, flag=SETTING)
    if options.arch != "auto" and options.arch not in rules.arches:
        raise MlacheckError(
            f"{SETTING}: no loaded family has kernels for it; choose auto or one of {', '.join(rules.arches)}",
            "arch",
            options.arch,
        )
    declared = next((os.environ[name] for name in rules.arch_env if os.environ.get(name)), None)
    return rules, options.arch if options.arch != "auto" else declared or arch.DEFAULT_ARCH


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
        raise MlacheckError(
            f"{SETTING}: is a file; give the run folder of the `mlacheck run` the workers join", "run_dir", path
        )
    if path.exists():
        check_folder(path)  # the workers would refuse it: say so now
    if not path.exists() or not (path / CAPTURE_CONFIG).is_file():
        note = f"{path} is not a run folder yet: `mlacheck run --run-dir {path} -- ...` makes it; start it before the workers"
    return {ENV_RUN_DIR: str(path)}, note
