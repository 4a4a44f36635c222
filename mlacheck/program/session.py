"""Program mode end to end: a run folder, the program run under observation, and its report."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from mlacheck.capture.spec import CapturePolicy
from mlacheck.environment import TARGET_ARCHES, flagship_sm_count
from mlacheck.errors import MlacheckError
from mlacheck.program.agent import serving_start_entry
from mlacheck.program.rundir import RunDir
from mlacheck.program.runner import run_program
from mlacheck.program.runs import program_report
from mlacheck.report.model import Report
from mlacheck.rules import load_rules


def prepare_run(run_dir: Path | None, rules_path: Path | None, compile_policy: str = "real", dry: bool = False,
                arch: str = "auto", num_sms: int | None = None,
                serving_start: list[str] | None = None) -> tuple[RunDir, dict, dict[str, str]]:
    """A new run folder holding the rules and what capture does; returns it, the capture config, and the
    environment the observed processes need on top of the caller's."""
    if arch != "auto" and arch not in TARGET_ARCHES.values():
        raise MlacheckError(f"--arch {arch}: choose auto, {', '.join(TARGET_ARCHES.values())}")
    if num_sms is not None and num_sms < 1:
        raise MlacheckError(f"--num-sms {num_sms}: an SM count is a positive number (148 on a B200)")
    for item in serving_start or []:
        if serving_start_entry(item) is None:
            raise MlacheckError(f"--serving-start {item}: write MODULE:QUALNAME or MODULE:QUALNAME@return")
    rules = load_rules(rules_path)
    target = arch if arch != "auto" else os.environ.get("CUTE_DSL_ARCH") or "sm_100a"
    policy = CapturePolicy(compile=compile_policy, replace_launch=dry, dry=dry, target_arch=target,
                           num_sms=num_sms or flagship_sm_count(target))
    run = RunDir.create(run_dir)
    config = {**rules.capture_config(), "policy": asdict(policy)}
    run.save([file.source for file in rules.files], config)
    environment = {"CUTE_DSL_ARCH": target} if dry and "CUTE_DSL_ARCH" not in os.environ else {}
    return run, config, environment


def observe_program(command: list[str], run_dir: Path | None, rules_path: Path | None, compile_policy: str = "real",
                    dry: bool = False, arch: str = "auto", num_sms: int | None = None,
                    serving_start: list[str] | None = None, context: dict[str, str] | None = None, strict: bool = False,
                    allow_incomplete: bool = False, known: set[str] | None = None, baseline_source: str | None = None,
                    on_start: Callable[[Path], None] | None = None) -> Report:
    """Run `command` observed, into a new run folder, and analyse it with the rules it was recorded under."""
    run, _, environment = prepare_run(run_dir, rules_path, compile_policy, dry, arch, num_sms, serving_start)
    if on_start is not None:
        on_start(run.path)
    gc.enable()  # the CLI runs with collections off; this process now waits on the program for as long as it runs
    meta = run_program(command, run, serving_start, extra_environment=environment)
    meta.update(compile_policy=compile_policy, dry=dry)
    run.write_meta(meta)
    return program_report([run.path], rules_path, strict, allow_incomplete, context, known, baseline_source)
