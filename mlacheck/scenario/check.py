"""The facade: one call runs the embedded scenario (an engine's start-up, then its traffic) under capture and
analyses it.

The families run through the kernel libraries' own dispatch functions, as the chosen engine calls them
(`engines.py`): prefill through tokenspeed_mla (`tokenspeed_mla_prefill`) or FlashAttention-4 (`fa4_prefill.py`,
vLLM's default), decode through tokenspeed_mla (`tokenspeed_mla_decode`) or FlashInfer's CuTe DSL MLA decode (SGLang
0.5.23). One mode a run: `parts.py` splits a run whose families a device runs only in part.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from mlacheck import __version__, arch
from mlacheck.analysis import analyse
from mlacheck.analysis.context_check import check_context
from mlacheck.capture import CapturePolicy, FamilyCapture
from mlacheck.capture.caches import check_rules
from mlacheck.capture.dry_entries import dry_entries
from mlacheck.capture.watch import compile_nets, family_captures
from mlacheck.errors import MlacheckError
from mlacheck.events import (
    CallbackSink,
    JsonlSink,
    MemorySink,
    TeeSink,
    exit_event,
    run_clock,
    run_event,
    start_run_clock,
)
from mlacheck.report.model import Report, ReportPolicy, build_report
from mlacheck.rulefiles import RuleSet, load_rules
from mlacheck.scenario import startup
from mlacheck.scenario.decode_run import DecodeRunner, FlashInferDecode
from mlacheck.scenario.decode_traffic import DecodePlan, decode_plan, parse_batch_sizes
from mlacheck.scenario.engines import EngineProfile, engine_profile, vllm_startup_prefills
from mlacheck.scenario.environment import (
    detect_environment,
    import_flashinfer_mla,
    import_tokenspeed_mla,
)
from mlacheck.scenario.fa4_prefill import INTERFACES, FA4Prefill, fa4_interface
from mlacheck.scenario.header import header_rows
from mlacheck.scenario.interrupt import DeferredInterrupt
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import dispatch, empty_tensors
from mlacheck.scenario.prefill_run import TrafficStats, run_traffic
from mlacheck.scenario.prefill_traffic import PROFILES, Request, make_workload
from mlacheck.scenario.presets import ModelPreset, model_preset
from mlacheck.scenario.sites import SiteMap
from mlacheck.scenario.warmup import resolve_warmup, run_warmup

PREFILL_FAMILY = "tokenspeed_mla.prefill"
DECODE_FAMILIES = {"tokenspeed_mla": "tokenspeed_mla.decode", "flashinfer": "flashinfer.cute_dsl_mla_decode"}
KV_CACHE_DTYPE = "float8_e4m3fn"  # tokenspeed_mla's backends require an FP8 KV cache
KERNELS = ("prefill", "decode", "all")
PREFILL_BACKENDS = ("tokenspeed_mla", "fa4")
FA4_FWD = "_flash_attn_fwd.compile_cache.cache"
FA4_CHUNK = 65536  # vLLM's context-chunk workspace rows (mla_attention.py:2534-2560): a prefix up to it is one chunk


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
    prefill_backend: str | None = None  # None: the profile's own


class Watch(Protocol):
    """What follows a run as it goes (a progress display): the phase it is in, and every event it writes."""

    def phase(self, name: str) -> None: ...

    def event(self, event: dict) -> None: ...


def driven(options: CheckOptions) -> tuple:
    """What the options drive: (the engine profile, the prefill backend, the rules, the family name of each kind,
    the kinds driven, the FA4 rules, and per kind the families that may watch it)."""
    if options.compile not in ("real", "skip"):
        raise MlacheckError(f"--compile {options.compile}: choose real or skip")
    if options.kernel not in KERNELS:
        raise MlacheckError(f"--kernel {options.kernel}: choose one of {', '.join(KERNELS)}")
    if options.num_sms is not None and options.num_sms < 1:
        raise MlacheckError(f"--num-sms {options.num_sms}: an SM count is a positive number (148 on a B200)")
    the_engine = engine_profile(options.profile)
    backend = options.prefill_backend or the_engine.prefill_backend
    if options.prefill_backend is not None and backend not in PREFILL_BACKENDS:
        raise MlacheckError(f"--prefill-backend {backend}: choose one of {', '.join(PREFILL_BACKENDS)}")
    rules = load_rules(options.rules)
    check_rules(rules)
    fa4 = backend == "fa4"
    families = {"prefill": PREFILL_FAMILY, "decode": DECODE_FAMILIES[the_engine.decode_backend]}
    kinds = _kinds(rules, options.kernel, options.rules, backend, families, the_engine.name)
    fa4_rules = [rule for rule in rules.families if rule.family.module in dict(INTERFACES)] if fa4 else []
    groups = [  # per kind driven, the families that may watch it (FA4: one per key layout)
        [rule.family for rule in fa4_rules if rule.family.cache == FA4_FWD]
        if kind == "prefill" and fa4
        else [rules.family(families[kind]).family]
        for kind in kinds
    ]
    return the_engine, backend, rules, families, kinds, fa4_rules, groups


def run_check(options: CheckOptions, policy: ReportPolicy = ReportPolicy(), watch: Watch | None = None) -> Report:
    """Start the engine up (warm-up, capture), send its traffic through the kernel libraries' dispatch, and
    analyse."""
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
    the_engine, backend, rules, families, kinds, fa4_rules, groups = driven(options)
    fa4 = backend == "fa4"
    driven_families = [family for group in groups for family in group]
    model = model_preset(options.model, options.tp)
    context_len = model.context_len if options.max_context_len is None else options.max_context_len
    batch_sizes = parse_batch_sizes(options.batch_sizes)
    kernel_arches = _common_arches(groups)
    arch_env = list(dict.fromkeys(name for family in driven_families for name in family.arch_env))
    environment = detect_environment(options.arch, kernel_arches, arch_env)
    if environment.mode == "execute" and options.compile == "skip":
        raise MlacheckError("--compile skip is refused in execute mode: kernels launch there, so they must be compiled")
    if environment.mode == "execute" and options.num_sms is not None:
        raise MlacheckError("--num-sms is refused in execute mode: the dispatch reads the device's own SM count")
    own_context = {
        "target_arch": environment.target_arch,
        "kv_cache_dtype": KV_CACHE_DTYPE,
        "engine": the_engine.engine,
        "d_qk": str(model.d_qk),
        "d_v": str(model.d_v),
        "num_heads": str(model.num_heads),
    }
    check_context(options.context, rules, own_context)
    flashinfer = the_engine.decode_backend == "flashinfer" and "decode" in kinds
    tokenspeed = ("decode" in kinds and not flashinfer) or ("prefill" in kinds and not fa4)
    package = import_tokenspeed_mla() if tokenspeed else None
    warmup = resolve_warmup(options.warmup, the_engine.engine, rules.family(families["prefill"]), fa4)
    plan = decode_plan(
        the_engine, batch_sizes, context_len, options.cuda_graph, options.cuda_graph_max_bs, options.seed
    )
    enable_pdl = environment.enable_pdl if the_engine.pdl is None else the_engine.pdl
    num_sms = options.num_sms or arch.flagship(environment.target_arch).sms
    if environment.mode != "execute":  # a fake or replaced device: the families read the target's SM count
        for name in dict.fromkeys(name for family in driven_families for name in family.sm_count_env):
            os.environ.setdefault(name, str(num_sms))
    launcher = LaunchCounter(execute=environment.mode == "execute")
    memory = MemorySink()
    sinks = [memory, *([JsonlSink(options.trace)] if options.trace is not None else [])]
    sinks += [CallbackSink(watch.event)] if watch is not None else []
    sink = sinks[0] if len(sinks) == 1 else TeeSink(*sinks)
    measurements = Measurements(sink)
    sink.write(run_event(os.getpid(), start_run_clock()))
    capture_policy = CapturePolicy(
        compile=options.compile,
        replace_launch=environment.mode != "execute",
        dry=environment.mode != "execute",
        target_arch=environment.target_arch,
        num_sms=num_sms,
    )
    frames = rules.phases + startup.FRAMES
    entries: list = []
    # a net under each kernel DSL's compile: what no watched family accounts for (MLA007), never launched in dry or
    # trace mode
    nets = compile_nets(rules.compile_nets, sink, frames, capture_policy.replace_launch)
    captures = [
        FamilyCapture(rules.family(families[kind]), sink, capture_policy, launcher.stand_in, frames)
        for kind in kinds
        if kind == "decode" or not fa4
    ]
    prefill_fa4, prefill_label = None, "tokenspeed_mla"
    if fa4 and "prefill" in kinds:
        interface, interface_label = fa4_interface()
        fa4_captures = family_captures(
            interface,
            [r for r in fa4_rules if r.family.module == interface.__name__],
            sink,
            capture_policy,
            frames,
            launcher.stand_in,
        )
        captures += fa4_captures
        family = next(
            (c.family.name for c in fa4_captures if isinstance(c, FamilyCapture) and c.family.cache == FA4_FWD),
            f"{interface.__name__} (not watched)",
        )
        prefill_fa4 = FA4Prefill(interface, model, environment.mode, launcher, measurements, family)
        prefill_label = f"FlashAttention-4 ({interface_label}: {interface.__name__})"
        if the_engine.engine == "vllm" and (arch.capability(environment.target_arch) or (10, 0)) < (10, 0):
            prefill_label += (
                f"; on {environment.target_arch} FA4's own kernels for it replay vLLM's Blackwell prefill path "
                "(vLLM itself prefills with FlashAttention-3 on Hopper)"
            )
    device = "cpu" if environment.mode == "dry" else "cuda"
    fp8 = the_engine.prefill_q_dtype == KV_CACHE_DTYPE
    q_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    decoder = None
    if flashinfer:
        entries = dry_entries([rules.family(families["decode"])], capture_policy)
        decoder = FlashInferDecode(
            import_flashinfer_mla(),
            model,
            enable_pdl,
            environment.mode,
            launcher,
            measurements,
            families["decode"],
            device,
        )
    elif "decode" in kinds:
        decoder = DecodeRunner(
            package, model, enable_pdl, environment.mode, launcher, measurements, families["decode"], device
        )
    stats, interrupted = TrafficStats(), None
    try:
        for capture in captures:
            capture.install()
        for entry in entries:
            entry.install(importlib.import_module(entry.module_name))
        for net in nets:
            net.install(importlib.import_module(net.net.module))
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
                            prefill_fa4,
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
                if prefill_fa4 is not None:
                    on_phase("prefill traffic")
                    stats = _fa4_traffic(prefill_fa4, the_engine, options, deferred.check)
                elif "prefill" in kinds:
                    on_phase("prefill traffic")
                    stats = run_traffic(
                        package.tokenspeed_mla_prefill,
                        make_workload(options.requests, options.seed),
                        the_engine.engine,
                        model,
                        environment.mode,
                        enable_pdl,
                        launcher,
                        measurements,
                        families["prefill"],
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
                f"the kernel library failed in {environment.mode} mode on {environment.device or 'the CPU'} "
                f"(target {environment.target_arch}): {type(exc).__name__}: {_first_line(exc)}"
            ) from None
    finally:
        for hook in reversed([*captures, *entries, *nets]):
            hook.remove()
        sink.write(exit_event(None, "interrupted" if interrupted else "scenario"))
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
    if "prefill" in kinds:
        scenario["prefill_backend"] = prefill_label
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
    analysis = analyse(memory.events, rules, run_context, interrupted=interrupted)
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
    prefill_fa4: FA4Prefill | None,
) -> list:
    """The start-up warm-up in the engine's order: its warm-up function, a dummy prefill, decode dummy forwards."""
    actions = []
    if prefill_fa4 is not None:
        arguments = {
            "q_dtype": torch.bfloat16,
            "d_qk": model.d_qk,
            "d_v": model.d_v,
            "num_heads": model.num_heads,
            "enable_pdl": enable_pdl,
            "target_arch": target_arch,
        }
        actions.append(lambda: run_warmup(warmup, arguments))
        for requests, tokens in vllm_startup_prefills(arch.capability(target_arch), options.cuda_graph):
            actions.append(lambda requests=requests, tokens=tokens: prefill_fa4.startup(requests, tokens))
    elif "prefill" in kinds:
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


def _fa4_traffic(
    prefill: FA4Prefill, the_engine: EngineProfile, options: CheckOptions, between: Callable[[], None]
) -> TrafficStats:
    """The workload's prefill calls through FA4, as the engine makes them (its context chunks: vLLM's workspace);
    `between` runs after each call (a held-back Ctrl-C stops there)."""
    stats = TrafficStats()
    for number, batch in enumerate(make_workload(options.requests, options.seed).batches):
        for index, call in enumerate(PROFILES[the_engine.engine](batch, FA4_CHUNK)):
            prefill.call(call, options.seed * 7919 + number * 131 + index)
            stats.prefill_calls += 1
            stats.tokens += sum(call.q_lens)
            between()
    return stats


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
        "warmup": warmup_label if "prefill" in kinds else None,
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


def _common_arches(groups: list[list]) -> list[str]:
    """The target arches every driven kind has kernels for (a kind: any of its families)."""
    unions = [list(dict.fromkeys(name for family in group for name in family.arches)) for group in groups]
    return [name for name in unions[0] if all(name in union for union in unions[1:])]


def _kinds(
    rules: RuleSet, kernel: str, path: Path | None, backend: str, families: dict[str, str], profile: str
) -> tuple[str, ...]:
    """The families to drive: the one asked for, or (all) every one of the scenario's that the rules declare."""
    if kernel == "prefill" and backend == "none":
        raise MlacheckError(
            f"--kernel prefill: {profile}'s prefill runs precompiled kernels (no JIT compile to check); choose "
            "decode or all, or name a JIT prefill with --prefill-backend"
        )
    fa4 = backend == "fa4"
    wanted = ("prefill", "decode") if kernel == "all" else (kernel,)
    wanted = tuple(kind for kind in wanted if kind != "prefill" or backend != "none")
    fa4_declared = any(r.family.module in dict(INTERFACES) and r.family.cache == FA4_FWD for r in rules.families)
    declared = tuple(
        kind
        for kind in wanted
        if (fa4_declared if kind == "prefill" and fa4 else rules.family(families[kind]) is not None)
    )
    if kernel == "all" and declared:
        return declared
    missing = next((kind for kind in wanted if kind not in declared), None)
    if missing == "prefill" and fa4:
        raise MlacheckError(
            f"{path}: the scenario prefills with FlashAttention-4, but no rule file declares its forward "
            "cache; add one (copy mlacheck's bundled flash_attn_4.toml)"
        )
    if missing is not None:
        bundled = load_rules().family(families[missing])
        source = Path(bundled.source).name if bundled is not None else "rule files"
        raise MlacheckError(
            f"{path}: the scenario drives {families[missing]}, but no rule file declares it; add it (copy "
            f"mlacheck's bundled {source})"
        )
    return declared


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
