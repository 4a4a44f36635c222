"""The facade: one call runs the embedded scenario (warm-up, then traffic) under capture and analyses it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from mlacheck import __version__
from mlacheck.analysis import analyse
from mlacheck.capture import CapturePolicy, FamilyCapture
from mlacheck.environment import detect_environment, flagship_sm_count, import_tokenspeed_mla
from mlacheck.errors import MlacheckError
from mlacheck.events import FORMAT_VERSION, JsonlSink, MemorySink, TeeSink
from mlacheck.report.model import Report, build_report
from mlacheck.rules import RuleSet, load_rules
from mlacheck.scenario.dispatch import FP8
from mlacheck.scenario.presets import model_preset
from mlacheck.scenario.prefill_run import Launcher, run_traffic
from mlacheck.scenario.traffic import PROFILES, make_workload
from mlacheck.scenario.warmup import resolve_warmup, run_warmup

PREFILL_FAMILY = "tokenspeed_mla.prefill"
KV_CACHE_DTYPE = "float8_e4m3fn"  # tokenspeed_mla's backends require an FP8 KV cache


@dataclass(frozen=True)
class CheckOptions:
    model: str = "deepseek-v3"
    tp: int = 1
    profile: str = "tokenspeed"
    warmup: str = "library"
    arch: str = "auto"
    compile: str = "real"
    rules: Path | None = None
    trace: Path | None = None
    requests: int = 8
    seed: int = 0
    num_sms: int | None = None


def run_check(options: CheckOptions, strict: bool = False, allow_incomplete: bool = False, known: set[str] | None = None,
              baseline_source: str | None = None, context: dict[str, str] | None = None) -> Report:
    """Warm up, send the traffic through tokenspeed_mla's dispatch, and analyse what the cache saw."""
    if options.profile not in PROFILES:
        raise MlacheckError(f"--profile {options.profile}: choose one of {', '.join(PROFILES)}")
    if options.compile not in ("real", "skip"):
        raise MlacheckError(f"--compile {options.compile}: choose real or skip")
    rules = load_rules(options.rules)
    _require_prefill_rule(rules, options.rules)
    model = model_preset(options.model, options.tp)
    environment = detect_environment(options.arch)
    if options.compile == "skip" and environment.mode == "execute":
        raise MlacheckError("--compile skip is refused in execute mode: kernels launch there, so they must be compiled")
    package = import_tokenspeed_mla()
    warmup = resolve_warmup(options.warmup)
    workload = make_workload(options.requests, options.seed)
    launcher = Launcher(execute=environment.mode == "execute")
    memory = MemorySink()
    sink = memory if options.trace is None else TeeSink(memory, JsonlSink(options.trace))
    sink.write({"type": "run", "format_version": FORMAT_VERSION, "pid": os.getpid(), "mlacheck_version": __version__, "started": time.time()})
    policy = CapturePolicy(compile=options.compile, replace_launch=environment.mode != "execute",
                           dry=environment.mode == "dry", target_arch=environment.target_arch,
                           num_sms=options.num_sms or flagship_sm_count(environment.target_arch))
    captures = [FamilyCapture(spec, sink, policy, launcher.stand_in) for spec in rules.capture_specs()]
    try:
        for capture in captures:
            capture.install()
        run_warmup(warmup, {"q_dtype": FP8, "d_qk": model.d_qk, "d_v": model.d_v, "num_heads": model.num_heads,
                            "enable_pdl": environment.enable_pdl, "target_arch": environment.target_arch})
        try:
            stats = run_traffic(package.tokenspeed_mla_prefill, workload, options.profile, model, environment.mode,
                                environment.enable_pdl, launcher, sink, PREFILL_FAMILY, options.seed,
                                device="cpu" if environment.mode == "dry" else "cuda")
        except Exception as exc:  # noqa: BLE001 - the library's own error, reported in one line
            raise MlacheckError(
                f"tokenspeed_mla_prefill failed in {environment.mode} mode on {environment.device or 'the CPU'} "
                f"(target {environment.target_arch}): {type(exc).__name__}: {_first_line(exc)}"
            ) from None
    finally:
        for capture in reversed(captures):
            capture.remove()
        sink.write({"type": "exit", "rank": None, "how": "scenario"})
        sink.close()
    context = {"target_arch": environment.target_arch, "kv_cache_dtype": KV_CACHE_DTYPE, "engine": options.profile,
               "d_qk": str(model.d_qk), "d_v": str(model.d_v), "num_heads": str(model.num_heads), **(context or {})}
    scenario = {
        "model": model.name, "tp": options.tp, "num_heads": model.num_heads, "d_qk": model.d_qk, "d_v": model.d_v,
        "warmup": warmup.label, "profile": options.profile, "requests": options.requests, "seed": options.seed,
        "prefill_calls": stats.prefill_calls, "tokens": stats.tokens, "launches": launcher.launches,
        "merge_max_abs_err": stats.merge_max_abs_err,
    }
    facts = {"mode": environment.mode, "target_arch": environment.target_arch, "compile_policy": options.compile,
             "mlacheck_version": __version__, "device": environment.device, "scenario": scenario}
    return build_report(analyse(memory.events, rules, context), facts, strict=strict, allow_incomplete=allow_incomplete,
                        known=known, baseline_source=baseline_source)


def _require_prefill_rule(rules: RuleSet, path: Path | None) -> None:
    if rules.family(PREFILL_FAMILY) is None:
        raise MlacheckError(
            f"{path}: the scenario drives tokenspeed_mla prefill, but no rule file declares family {PREFILL_FAMILY!r}; "
            "add it (copy the bundled rules/tokenspeed_mla_prefill.toml)"
        )


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
