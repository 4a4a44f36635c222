"""Warm-up sources: the compile path under test.

`library` calls tokenspeed_mla's own `warmup_compile_prefill` as the TokenSpeed engine does; `none`
precompiles nothing; `PATH.py:FUNC` or `pkg.module:FUNC` calls a user's function with the keyword
arguments in `WARMUP_ARGUMENTS` that its signature accepts (all of them if it takes **kwargs).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlacheck.errors import MlacheckError

WARMUP_ARGUMENTS = ("q_dtype", "d_qk", "d_v", "num_heads", "enable_pdl", "target_arch")
"""q_dtype: the torch dtype the traffic feeds (torch.float8_e4m3fn); d_qk, d_v, num_heads: the model's
attention dims (num_heads already divided by --tp); enable_pdl: bool; target_arch: e.g. 'sm_100a'."""


@dataclass(frozen=True)
class WarmupSource:
    label: str
    function: Callable[..., object] | None


def resolve_warmup(spec: str) -> WarmupSource:
    """Turn `--warmup` into a callable; problems are one line."""
    if spec == "none":
        return WarmupSource("none", None)
    if spec == "library":
        from tokenspeed_mla import mla_prefill

        return WarmupSource("library: tokenspeed_mla.warmup_compile_prefill", _library_warmup(mla_prefill))
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
        raise MlacheckError(f"warm-up {source.label} raised {type(exc).__name__}: {exc}; fix the warm-up function") from None


def _library_warmup(mla_prefill) -> Callable[..., object]:
    def library_warmup(q_dtype, d_qk, d_v, enable_pdl):
        # As lightseekorg/tokenspeed's CuteDSLMLABackend.__init__ calls it.
        mla_prefill.warmup_compile_prefill(q_dtype=q_dtype, d_qk=d_qk, d_v=d_v, enable_pdl=enable_pdl)

    return library_warmup


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
