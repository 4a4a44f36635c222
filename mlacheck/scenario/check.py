"""The facade: one call runs the embedded scenario (an engine's start-up, then its traffic) under capture and
analyses it.

The families run through tokenspeed_mla's own dispatch functions: prefill (`tokenspeed_mla_prefill`) and
decode (`tokenspeed_mla_decode`), as the chosen engine calls them (`engines.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from mlacheck import __version__, arch
from mlacheck.analysis import analyse
from mlacheck.analysis.context_check import check_context
from mlacheck.capture import CapturePolicy, FamilyCapture
from mlacheck.capture.caches import check_rules
from mlacheck.errors import MlacheckError
from mlacheck.events import (
    FORMAT_VERSION,
    CallbackSink,
    JsonlSink,
    MemorySink,
    TeeSink,
    run_clock,
    start_run_clock,
)
from mlacheck.report.model import Report, ReportPolicy, build_report
from mlacheck.rulefiles import RuleSet, load_rules
from mlacheck.scenario import startup
from mlacheck.scenario.decode_run import DecodeRunner
from mlacheck.scenario.decode_traffic import DecodePlan, decode_plan, parse_batch_sizes
from mlacheck.scenario.engines import EngineProfile, engine_profile
from mlacheck.scenario.environment import detect_environment, import_tokenspeed_mla
from mlacheck.scenario.header import header_rows
from mlacheck.scenario.interrupt import DeferredInterrupt
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import dispatch, empty_tensors
from mlacheck.scenario.prefill_run import TrafficStats, run_traffic
from mlacheck.scenario.prefill_traffic import Request, make_workload
from mlacheck.scenario.presets import ModelPreset, model_preset
from mlacheck.scenario.sites import SiteMap
from mlacheck.scenario.warmup import resolve_warmup, run_warmup

FAMILIES = {"prefill": "tokenspeed_mla.prefill", "decode": "tokenspeed_mla.decode"}
KV_CACHE_DTYPE = "float8_e4m3fn"  # tokenspeed_mla's backends require an FP8 KV cache
KERNELS = ("prefill", "decode", "all")


@dataclass(frozen=True)
class CheckOptions:
    model: str = "deepseek-v3"
    tp: int = 1
    profile: str = "tokenspeed"
    warmup: str = "engine"
    arch: str = "auto"
    compile: str = "real"
    rules: Path | None = None
    trace: Path | None = None
    requests: int = 8
    seed: int = 0
    num_sms: int | None = None
    kernel: str = "all"
    cuda_graph: bool = True
    cuda_graph_max_bs: int | None = None
    max_context_len: int | None = None
    batch_sizes: str | None = None
    context: dict[str, str] | None = None  # --context: the run context over the scenario's own


class Watch(Protocol):
    """What follows a run as it goes (a progress display): the phase it is in, and every event it writes."""

    def phase(self, name: str) -> None: ...

    def event(self, event: dict) -> None: ...


def run_check(options: CheckOptions, policy: ReportPolicy = ReportPolicy(), watch: Watch | None = None) -> Report:
    """Start the engine up (warm-up, capture), send its traffic through tokenspeed_mla's dispatch, and analyse."""
    shown = watch.phase if watch is not None else lambda name: None
    current, phases = ["start-up"], []

    def on_phase(name: str) -> None:
        """A phase starts: shown, and timed for the report's timeline (seconds since the run event)."""
        current[0] = name
        shown(name)
        if phases:
            phases[-1]["end"] = run_clock()
        if name != "analysis":
            phases.append({"name": name, "start": run_clock(), "end": None})

    deferred = DeferredInterrupt(lambda: shown(f"Ctrl-C: stopping after the step under way ({current[0]})"))
    if options.compile not in ("real", "skip"):
        raise MlacheckError(f"--compile {options.compile}: choose real or skip")
    if options.kernel not in KERNELS:
        raise MlacheckError(f"--kernel {options.kernel}: choose one of {', '.join(KERNELS)}")
    if options.num_sms is not None and options.num_sms < 1:
        raise MlacheckError(f"--num-sms {options.num_sms}: an SM count is a positive number (148 on a B200)")
    the_engine = engine_profile(options.profile)
    rules = load_rules(options.rules)
    check_rules(rules)
    kinds = _kinds(rules, options.kernel, options.rules)
    driven = [rules.family(FAMILIES[kind]).family for kind in kinds]
    model = model_preset(options.model, options.tp)
    context_len = model.context_len if options.max_context_len is None else options.max_context_len
    batch_sizes = parse_batch_sizes(options.batch_sizes)
    kernel_arches = [name for name in driven[0].arches if all(name in family.arches for family in driven)]
    arch_env = list(dict.fromkeys(name for family in driven for name in family.arch_env))
    environment = detect_environment(options.arch, kernel_arches, arch_env)
    if environment.mode == "execute" and options.compile == "skip":
        raise MlacheckError("--compile skip is refused in execute mode: kernels launch there, so they must be compiled")
    if environment.mode == "execute" and options.num_sms is not None:
        raise MlacheckError("--num-sms is refused in execute mode: the dispatch reads the device's own SM count")
    own_context = {
        "target_arch": environment.target_arch,
        "kv_cache_dtype": KV_CACHE_DTYPE,
        "engine": the_engine.name,
        "d_qk": str(model.d_qk),
        "d_v": str(model.d_v),
        "num_heads": str(model.num_heads),
    }
    check_context(options.context, rules, own_context)
    package = import_tokenspeed_mla()
    warmup = resolve_warmup(options.warmup, the_engine.name, rules.family(FAMILIES["prefill"]))
    plan = decode_plan(
        the_engine, batch_sizes, context_len, options.cuda_graph, options.cuda_graph_max_bs, options.seed
    )
    enable_pdl = environment.enable_pdl if the_engine.pdl is None else the_engine.pdl
    num_sms = options.num_sms or arch.flagship(environment.target_arch).sms
    launcher = LaunchCounter(execute=environment.mode == "execute")
    memory = MemorySink()
    sinks = [memory, *([JsonlSink(options.trace)] if options.trace is not None else [])]
    sinks += [CallbackSink(watch.event)] if watch is not None else []
    sink = sinks[0] if len(sinks) == 1 else TeeSink(*sinks)
    measurements = Measurements(sink)
    sink.write(
        {
            "type": "run",
            "format_version": FORMAT_VERSION,
            "pid": os.getpid(),
            "mlacheck_version": __version__,
            "started": start_run_clock(),
        }
    )
    capture_policy = CapturePolicy(
        compile=options.compile,
        replace_launch=environment.mode != "execute",
        dry=environment.mode != "execute",
        target_arch=environment.target_arch,
        num_sms=num_sms,
    )
    captures = [
        FamilyCapture(
            rules.family(FAMILIES[kind]), sink, capture_policy, launcher.stand_in, rules.phases + startup.FRAMES
        )
        for kind in kinds
    ]
    device = "cpu" if environment.mode == "dry" else "cuda"
    fp8 = the_engine.prefill_q_dtype == KV_CACHE_DTYPE
    q_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    decoder = (
        DecodeRunner(package, model, enable_pdl, environment.mode, launcher, measurements, FAMILIES["decode"], device)
        if "decode" in kinds
        else None
    )
    stats, interrupted = TrafficStats(), None
    try:
        for capture in captures:
            capture.install()
        try:
            with deferred:
                startup.run_phases(
                    captures,
                    _checked(
                        _warmup_actions(
                            the_engine,
                            options,
                            warmup,
                            plan,
                            decoder,
                            package,
                            model,
                            enable_pdl,
                            environment.target_arch,
                            q_dtype,
                            device,
                            kinds,
                        ),
                        deferred.check,
                    ),
                    _checked(
                        [
                            lambda step=step: decoder.step(step, options.seed)
                            for step in plan.steps
                            if step.phase == "capture" and decoder is not None
                        ],
                        deferred.check,
                    ),
                    on_phase,
                )
                if "prefill" in kinds:
                    on_phase("prefill traffic")
                    stats = run_traffic(
                        package.tokenspeed_mla_prefill,
                        make_workload(options.requests, options.seed),
                        the_engine.name,
                        model,
                        environment.mode,
                        enable_pdl,
                        launcher,
                        measurements,
                        FAMILIES["prefill"],
                        options.seed,
                        device,
                        fp8,
                        deferred.check,
                    )
                if decoder is not None:
                    on_phase("decode traffic")
                for number, step in enumerate(s for s in plan.steps if s.phase == "serving" and decoder is not None):
                    decoder.step(step, options.seed * 7919 + number)
                    deferred.check()
                deferred.check()
        except KeyboardInterrupt:  # held back to a step boundary: report what ran before it
            interrupted = current[0]
        except MlacheckError:
            raise
        except Exception as exc:  # noqa: BLE001 - the library's own error, reported in one line
            raise MlacheckError(
                f"tokenspeed_mla failed in {environment.mode} mode on {environment.device or 'the CPU'} "
                f"(target {environment.target_arch}): {type(exc).__name__}: {_first_line(exc)}"
            ) from None
    finally:
        for capture in reversed(captures):
            capture.remove()
        sink.write(
            {"type": "exit", "rank": None, "how": "interrupted" if interrupted else "scenario", "t": run_clock()}
        )
        sink.close()
    run_context = {**own_context, **(options.context or {})}
    scenario = _scenario_facts(
        options,
        the_engine,
        model,
        warmup.label,
        stats,
        plan,
        decoder,
        launcher,
        context_len,
        arch.sm_count_label(environment.target_arch, options.num_sms),
        kinds,
    )
    scenario.update(header=header_rows(scenario, environment.mode), measured=measurements.columns(), phases=phases)
    facts = {
        "mode": environment.mode,
        "target_arch": environment.target_arch,
        "compile_policy": options.compile,
        "mlacheck_version": __version__,
        "device": environment.device,
        "scenario": scenario,
        "interrupted": interrupted,
    }
    on_phase("analysis")
    SiteMap(the_engine, warmup.library).rewrite(memory.events)
    analysis = analyse(memory.events, rules, run_context)
    if interrupted:
        analysis.incomplete.insert(0, f"the run was interrupted (Ctrl-C) during {interrupted}: the rest was not run")
    return build_report(analysis, facts, policy=policy)


def _checked(actions: list, check) -> list:
    """Each action followed by `check` (where a held-back Ctrl-C is raised: after the compile under way)."""
    return [lambda action=action: (action(), check()) for action in actions]


def _warmup_actions(
    the_engine: EngineProfile,
    options: CheckOptions,
    warmup,
    plan: DecodePlan,
    decoder: DecodeRunner | None,
    package,
    model: ModelPreset,
    enable_pdl: bool,
    target_arch: str,
    q_dtype: torch.dtype,
    device: str,
    kinds: tuple[str, ...],
) -> list:
    """The start-up warm-up in the engine's order: its warm-up function, a dummy prefill, decode dummy forwards."""
    actions = []
    if "prefill" in kinds:
        arguments = {
            "q_dtype": q_dtype,
            "d_qk": model.d_qk,
            "d_v": model.d_v,
            "num_heads": model.num_heads,
            "enable_pdl": enable_pdl,
            "target_arch": target_arch,
        }
        actions.append(lambda: run_warmup(warmup, arguments))
        if the_engine.startup_prefill == "always" or (
            the_engine.startup_prefill == "with graphs" and options.cuda_graph
        ):
            for call in the_engine.prefill_calls((Request(2),), 4096):
                actions.append(
                    lambda call=call: dispatch(
                        package.tokenspeed_mla_prefill,
                        call,
                        empty_tensors(call, model, device, q_dtype),
                        model,
                        enable_pdl,
                    )
                )
    if decoder is not None:
        actions += [lambda step=step: decoder.step(step, options.seed) for step in plan.steps if step.phase == "warmup"]
    return actions


def _scenario_facts(
    options: CheckOptions,
    the_engine: EngineProfile,
    model: ModelPreset,
    warmup_label: str,
    stats: TrafficStats,
    plan: DecodePlan,
    decoder: DecodeRunner | None,
    launcher: LaunchCounter,
    context_len: int,
    sms: str,
    kinds: tuple[str, ...],
) -> dict:
    facts = {
        "model": model.name,
        "tp": options.tp,
        "num_heads": model.num_heads,
        "d_qk": model.d_qk,
        "d_v": model.d_v,
        "profile": the_engine.name,
        "engine_source": the_engine.source,
        "engine_release": the_engine.release,
        "kernels": list(kinds),
        "warmup": warmup_label,
        "cuda_graph": options.cuda_graph,
        "launches": launcher.launches,
    }
    if "prefill" in kinds:
        facts.update(
            requests=options.requests,
            seed=options.seed,
            prefill_calls=stats.prefill_calls,
            tokens=stats.tokens,
            prefill_q_dtype=the_engine.prefill_q_dtype,
            merge_max_abs_err=stats.merge_max_abs_err,
        )
    if decoder is not None:
        facts.update(
            sm_count=sms,
            context_len=context_len,
            capture_sizes=list(plan.capture_sizes),
            batch_sizes=list(plan.batch_sizes),
            eager_batch_sizes=list(plan.eager_sizes),
            replays=plan.replays,
            decode_dispatches=decoder.dispatches,
        )
    return facts


def _kinds(rules: RuleSet, kernel: str, path: Path | None) -> tuple[str, ...]:
    """The families to drive: the one asked for, or (all) every one of the scenario's that the rules declare."""
    wanted = ("prefill", "decode") if kernel == "all" else (kernel,)
    declared = tuple(kind for kind in wanted if rules.family(FAMILIES[kind]) is not None)
    if kernel == "all" and declared:
        return declared
    missing = next((kind for kind in wanted if kind not in declared), None)
    if missing is not None:
        raise MlacheckError(
            f"{path}: the scenario drives {FAMILIES[missing]}, but no rule file declares it; add it (copy "
            f"mlacheck's bundled {FAMILIES[missing].replace('.', '_')}.toml)"
        )
    return declared


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
