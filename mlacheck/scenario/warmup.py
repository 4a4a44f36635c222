"""Warm-up sources: the prefill compile path under test (decode is warmed by the engine's CUDA-graph capture).

`engine` is the profile's engine as published (see `engines.py`): TokenSpeed calls `warmup_compile_prefill`
with the KV cache dtype; SGLang compiles three FP8 variants through `_compile_prefill_kernel`; vLLM calls
`warmup_compile_prefill` for bf16 and fp8 with enable_pdl=False. `library` calls `warmup_compile_prefill`
with the traffic's q dtype; `none` precompiles nothing; `PATH.py:FUNC` or `pkg.module:FUNC` calls a user's
function with those of these keyword arguments that its signature accepts (all of them if it takes
**kwargs): q_dtype (the torch dtype the prefill traffic feeds), d_qk, d_v, num_heads (already divided by
--tp), enable_pdl (bool) and target_arch (e.g. "sm_100a").
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import RuleFile
from mlacheck.scenario.engines import VLLM_FA4_WARMUP


@dataclass(frozen=True)
class WarmupSource:
    label: str
    function: Callable[..., object] | None
    library: Callable[..., object] | None = None  # `library`: the kernel library's own warm-up function


def resolve_warmup(spec: str, engine: str, prefill: RuleFile | None, fa4: bool = False) -> WarmupSource:
    """Turn `--warmup` into a callable (`library`: the prefill family's own `warmup` function); problems are one line.
    With the FA4 prefill backend, `engine` is the engine's own FA4 warm-up (vLLM 0.34.0's compiles nothing)."""
    if spec == "none":
        return WarmupSource("none", None)
    if fa4 and spec == "engine":
        return WarmupSource(f"engine: {VLLM_FA4_WARMUP}", None)
    if fa4 and spec == "library":
        raise MlacheckError(
            "--warmup library: FlashAttention-4 has no warm-up function of its own; use engine, none or PATH.py:FUNC"
        )
    if spec == "library":
        family = prefill.family if prefill is not None else None
        if family is None or family.warmup is None:
            raise MlacheckError(
                "--warmup library: the prefill family's rule file names no warmup function; pick another"
            )
        function = getattr(_import(spec, family.module), family.warmup, None)
        if not callable(function):
            raise MlacheckError(
                f"--warmup library: {family.module} has no function {family.warmup!r}; re-check the rule file"
            )
        return WarmupSource(f"library: {family.module}.{family.warmup}", _library_warmup(function), function)
    if spec == "engine":
        from tokenspeed_mla import mla_prefill

        return WarmupSource(f"engine: {ENGINE_WARMUPS[engine][0]}", ENGINE_WARMUPS[engine][1](mla_prefill))
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise MlacheckError(f"--warmup {spec!r}: use library, none, PATH.py:FUNC or pkg.module:FUNC")
    module = _load_file(spec, Path(where)) if where.endswith(".py") else _import(spec, where)
    function = getattr(module, name, None)
    if not callable(function):
        raise MlacheckError(f"--warmup {spec}: {where} has no function {name!r}")
    return WarmupSource(spec, function)


def run_warmup(source: WarmupSource, arguments: dict[str, object]) -> None:
    """Call the warm-up with the arguments it accepts; an exception in it is one line."""
    if source.function is None:
        return
    try:
        parameters = inspect.signature(source.function).parameters.values()
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
        names = {p.name for p in parameters}
        source.function(**{k: v for k, v in arguments.items() if takes_any or k in names})
    except MlacheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's warm-up may raise anything
        raise MlacheckError(
            f"warm-up {source.label} raised {type(exc).__name__}: {exc}; fix the warm-up function"
        ) from None


def _library_warmup(warmup: Callable[..., object]) -> Callable[..., object]:
    def library_warmup(q_dtype, d_qk, d_v, enable_pdl):
        warmup(q_dtype=q_dtype, d_qk=d_qk, d_v=d_v, enable_pdl=enable_pdl)

    return library_warmup


def _tokenspeed_warmup(mla_prefill) -> Callable[..., object]:
    def tokenspeed_warmup(d_qk, d_v, enable_pdl):
        # tokenspeed 0.1.1 backends/paged/tokenspeed_mla.py:258-263: q_dtype is the KV cache dtype (FP8).
        mla_prefill.warmup_compile_prefill(q_dtype=torch.float8_e4m3fn, d_qk=d_qk, d_v=d_v, enable_pdl=enable_pdl)

    return tokenspeed_warmup


def _sglang_warmup(mla_prefill) -> Callable[..., object]:
    def sglang_warmup(d_qk, d_v, enable_pdl):
        # sglang 0.5.13 tokenspeed_mla_backend.py:137-150, TokenspeedMLABackend.__init__.
        ex2 = mla_prefill._enable_ex2_emulation()
        for is_causal, return_lse in ((True, True), (True, False), (False, True)):
            key = (torch.float8_e4m3fn, d_qk, d_v, is_causal, return_lse, enable_pdl, ex2)
            if key not in mla_prefill._compiled_kernels:
                mla_prefill._compiled_kernels[key] = mla_prefill._compile_prefill_kernel(
                    torch.float8_e4m3fn, d_qk, d_v, is_causal, return_lse, use_pdl=enable_pdl, enable_ex2_emulation=ex2
                )

    return sglang_warmup


def _vllm_warmup(mla_prefill) -> Callable[..., object]:
    def vllm_warmup(d_qk, d_v):
        # vllm 0.34.0 v1/attention/backends/mla/tokenspeed_mla.py:253-264, TokenspeedMLAImpl.__init__.
        for q_dtype in (torch.bfloat16, torch.float8_e4m3fn):
            mla_prefill.warmup_compile_prefill(q_dtype=q_dtype, d_qk=d_qk, d_v=d_v, enable_pdl=False)

    return vllm_warmup


ENGINE_WARMUPS = {
    "tokenspeed": ("CuteDSLMLABackend.__init__, warmup_compile_prefill(q_dtype=float8_e4m3fn)", _tokenspeed_warmup),
    "sglang": (
        "TokenspeedMLABackend.__init__, 3 float8_e4m3fn variants through _compile_prefill_kernel",
        _sglang_warmup,
    ),
    "vllm": (
        "TokenspeedMLAImpl.__init__, warmup_compile_prefill for bfloat16 and float8_e4m3fn, enable_pdl=False",
        _vllm_warmup,
    ),
}


def _load_file(spec: str, path: Path):
    if not path.is_file():
        raise MlacheckError(f"--warmup {spec}: no such file {path}")
    name = f"mlacheck_warmup_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001
        raise MlacheckError(f"--warmup {spec}: importing {path} raised {type(exc).__name__}: {exc}") from None
    return module


def _import(spec: str, module: str):
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001
        raise MlacheckError(f"--warmup {spec}: cannot import {module} ({type(exc).__name__}: {exc})") from None
