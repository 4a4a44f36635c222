"""The facade: one call runs the embedded scenario (an engine's start-up, then its traffic) under capture and
analyses it.

The options decide what runs (`setup.py`: the engine, one module of `engines/`, and a backend per kernel kind,
`backends.py`); the run's steps are planned once (`plan.py`) and run in order under capture, installed as program mode
installs it (`installed.py`); the events are analysed with every site named as the engine line it models
(`sites.py`). One mode a run: `parts.py` splits a run whose families a device runs only in part.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Protocol

from mlacheck import __version__, arch
from mlacheck.analysis import analyse
from mlacheck.analysis.context_check import check_context
from mlacheck.capture import CapturePolicy
from mlacheck.errors import MlacheckError
from mlacheck.events import exit_event, run_clock, run_event, serving_start_event, start_run_clock
from mlacheck.report.model import Report, build_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.scenario import startup
from mlacheck.scenario.backends import Bound, TrafficStats
from mlacheck.scenario.environment import Environment
from mlacheck.scenario.header import header_rows
from mlacheck.scenario.installed import Installed
from mlacheck.scenario.interrupt import DeferredInterrupt
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.library_warnings import LibraryWarnings
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.plan import TRAFFIC, DecodePart, Plan, PrefillPart, Step, make_plan
from mlacheck.scenario.setup import CheckOptions, Setup, prepare
from mlacheck.scenario.sites import SiteMap
from mlacheck.scenario.warmup import WarmupSource, resolve_warmup
from mlacheck.sinks import CallbackSink, JsonlSink, MemorySink, TeeSink


class Watch(Protocol):
    """What follows a run as it goes (a progress display): the phase it is in, and every event it writes."""

    def phase(self, name: str) -> None: ...

    def event(self, event: dict) -> None: ...


def run_check(
    options: CheckOptions, policy: ReportPolicy = ReportPolicy(), watch: Watch | None = None, setup: Setup | None = None
) -> Report:
    """Start the engine up (warm-up, capture), send its traffic through the kernel libraries' dispatch, and
    analyse. `setup`: what the options drive, where the caller has decided it already."""
    setup = setup if setup is not None else prepare(options)
    environment = setup.environment()
    own_context = setup.context(environment)
    check_context(options.context, setup.rules, own_context)
    library = LibraryWarnings(shown=options.library_warnings_shown)
    with library.held():
        loaded = {kind: backend.load(setup.engine, setup.rules) for kind, backend in setup.backends.items()}
    warmup = _warmup(setup) if "prefill" in loaded else None
    decode = setup.decode_plan() if "decode" in loaded else None
    recorder = Recorder(options.trace, watch)
    bound = Bound(
        setup.engine,
        setup.model,
        environment.mode,
        setup.enable_pdl(environment),
        LaunchCounter(execute=environment.mode == "execute"),
        Measurements(recorder.sink),
        "cpu" if environment.mode == "dry" else "cuda",
    )
    interrupted = None
    try:
        with Installed(
            list(dict.fromkeys(each.module for each in loaded.values())),
            setup.rules,
            recorder.sink,
            _capture_policy(setup, environment),
            setup.rules.phases + startup.FRAMES,
            bound.launcher.stand_in,
        ) as installed:
            runners = {
                kind: setup.backends[kind].runner(each, bound, installed.family(each.module, setup.watching[kind]))
                for kind, each in loaded.items()
            }
            prefill = _prefill_part(setup, environment, bound, runners.get("prefill"), warmup)
            decoding = DecodePart(runner=runners["decode"], plan=decode) if decode is not None else None
            plan = make_plan(setup.engine, prefill, decoding, options.seed)
            interrupted = execute(plan, installed.hooks, recorder, environment, library)
    finally:
        recorder.close(interrupted)
    facts = _facts(setup, environment, prefill, decoding, bound, recorder, interrupted, library)
    recorder.phase("analysis")
    SiteMap(plan.sites()).rewrite(recorder.memory.events)
    analysis = analyse(
        recorder.memory.events, setup.rules, {**own_context, **(options.context or {})}, interrupted=interrupted
    )
    return build_report(analysis, facts, policy=policy)


class Recorder:
    """Where a run's events go (memory, the --trace file, the progress display), and the timeline of its phases."""

    def __init__(self, trace: Path | None, watch: Watch | None) -> None:
        self.memory = MemorySink()
        sinks = [self.memory, *([JsonlSink(trace)] if trace is not None else [])]
        sinks += [CallbackSink(watch.event)] if watch is not None else []
        self.sink = sinks[0] if len(sinks) == 1 else TeeSink(*sinks)
        self.shown = watch.phase if watch is not None else lambda name: None
        self.current, self.phases = "start-up", []
        self.sink.write(run_event(os.getpid(), start_run_clock()))

    def phase(self, name: str) -> None:
        """A phase starts: shown, and timed for the report's timeline (seconds since the run event)."""
        self.current = name
        self.shown(name)
        if self.phases:
            self.phases[-1]["end"] = run_clock()
        if name != "analysis":
            self.phases.append({"name": name, "start": run_clock(), "end": None})

    def serving_started(self, hooks: list) -> None:
        """Serving starts now (the engine's traffic begins): said in the trace and to every capture, as a program's
        process marks it (`mlacheck.serving_started()`); from here every compile is a serving-path compile."""
        self.sink.write(serving_start_event("the scenario's traffic starts", None))
        for hook in hooks:
            hook.serving_started()

    def close(self, interrupted: str | None) -> None:
        self.sink.write(exit_event(None, "interrupted" if interrupted else "scenario"))
        self.sink.close()


def execute(
    plan: Plan, hooks: list, recorder: Recorder, environment: Environment, library: LibraryWarnings
) -> str | None:
    """Run the plan's steps, phase by phase, the libraries' warnings held back but in a user's own step, serving start
    marked where the traffic begins; a Ctrl-C is held back to the end of the step under way. The phase it stopped in,
    or None."""
    deferred = DeferredInterrupt(
        lambda: recorder.shown(f"Ctrl-C: stopping after the step under way ({recorder.current})")
    )
    try:
        with deferred:
            marked = False
            for phase in plan.phases:
                recorder.phase(phase)
                if phase in TRAFFIC and not marked:
                    recorder.serving_started(hooks)
                    marked = True
                actions = [lambda step=step: (_run(step, library), deferred.check()) for step in plan.steps_in(phase)]
                startup.run_phase(phase, actions, hooks)
            deferred.check()
    except KeyboardInterrupt:  # held back to a step boundary: report what ran before it
        return recorder.current
    except MlacheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's own error, reported in one line
        raise MlacheckError(
            f"the kernel library failed in {environment.mode} mode on {environment.device or 'the CPU'} "
            f"(target {environment.target_arch}): {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    return None


def _run(step: Step, library: LibraryWarnings) -> None:
    with contextlib.nullcontext() if step.users else library.held():
        step.action()


def _warmup(setup: Setup) -> WarmupSource:
    backend = setup.backends["prefill"]
    return resolve_warmup(
        setup.options.warmup, setup.path.warmup, setup.engine.release, lambda: backend.library_warmup(setup.rules)
    )


def _capture_policy(setup: Setup, environment: Environment) -> CapturePolicy:
    return CapturePolicy(
        compile=setup.options.compile,
        replace_launch=environment.mode != "execute",
        dry=environment.mode != "execute",
        target_arch=environment.target_arch,
        num_sms=setup.num_sms(environment),
    )


def _prefill_part(setup: Setup, environment: Environment, bound: Bound, runner, warmup) -> PrefillPart | None:
    if runner is None:
        return None
    arguments = {
        "q_dtype": runner.q_dtype,
        "d_qk": setup.model.d_qk,
        "d_v": setup.model.d_v,
        "num_heads": setup.model.num_heads,
        "enable_pdl": bound.enable_pdl,
        "target_arch": environment.target_arch,
    }
    capability = arch.capability(environment.target_arch)
    return PrefillPart(
        runner=runner,
        path=setup.path,
        warmup=warmup,
        arguments=arguments,
        startup=setup.path.startup(capability, setup.options.cuda_graph),
        workload=setup.workload,
    )


def _facts(
    setup: Setup,
    environment: Environment,
    prefill: PrefillPart | None,
    decode: DecodePart | None,
    bound: Bound,
    recorder: Recorder,
    interrupted: str | None,
    library: LibraryWarnings,
) -> dict:
    """The report's facts of the run, and its scenario part (the model, the engine, what ran, the header)."""
    options, model, the_engine, measurements = setup.options, setup.model, setup.engine, bound.measurements
    scenario = {
        "model": model.name,
        "tp": options.tp,
        "num_heads": model.num_heads,
        "d_qk": model.d_qk,
        "d_v": model.d_v,
        "profile": the_engine.name,
        "engine_source": the_engine.source,
        "engine_release": the_engine.release,
        "kernels": list(setup.kinds),
        "warmup": prefill.warmup.label if prefill is not None else None,
        "cuda_graph": options.cuda_graph,
        "launches": bound.launcher.launches,
        "library_warnings": None if library.shown else library.count,
    }
    if prefill is not None:
        stats: TrafficStats = prefill.runner.stats
        scenario.update(
            requests=options.requests,
            seed=options.seed,
            prefill_calls=stats.prefill_calls,
            tokens=stats.tokens,
            prefill_q_dtype=the_engine.prefill_q_dtype,
            merge_max_abs_err=stats.merge_max_abs_err,
        )
    if decode is not None:
        scenario.update(
            sm_count=arch.sm_count_label(environment.target_arch, options.num_sms),
            context_len=setup.context_len,
            capture_sizes=list(decode.plan.capture_sizes),
            batch_sizes=list(decode.plan.batch_sizes),
            eager_batch_sizes=list(decode.plan.eager_sizes),
            replays=decode.plan.replays,
            decode_dispatches=decode.runner.dispatches,
        )
    if prefill is not None:
        note = prefill.path.note(environment.target_arch) if prefill.path.note is not None else ""
        scenario["prefill_backend"] = prefill.runner.label + note
    scenario.update(
        header=header_rows(scenario, environment.mode), measured=measurements.columns(), phases=recorder.phases
    )
    return {
        "mode": environment.mode,
        "target_arch": environment.target_arch,
        "compile_policy": options.compile,
        "mlacheck_version": __version__,
        "device": environment.device,
        "scenario": scenario,
        "interrupted": interrupted,
    }


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
