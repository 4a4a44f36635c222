"""Warm-up sources: the prefill compile path under test (decode is warmed by the engine's CUDA-graph capture).

`engine` is the engine's own warm-up for the prefill backend (`engine.Warmup`, in the engine's module); `library` is
the backend's (tokenspeed_mla: `warmup_compile_prefill` with the traffic's q dtype); `none` precompiles nothing;
`PATH.py:FUNC` or `pkg.module:FUNC` calls a user's function with those of these keyword arguments that its signature
accepts (all of them if it takes **kwargs): q_dtype (the torch dtype the prefill traffic feeds), d_qk, d_v, num_heads
(already divided by --tp), enable_pdl (bool) and target_arch (e.g. "sm_100a").
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlacheck.capture.stack import short_path
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import RuleFile
from mlacheck.scenario.engine import Warmup
from mlacheck.scenario.sites import Site, span


@dataclass(frozen=True)
class WarmupSource:
    label: str
    function: Callable[..., object] | None
    sites: tuple[Site, ...] = ()  # its functions that call the kernel library, and what each stands for
    users: bool = False  # the user's own function (PATH.py:FUNC or pkg.module:FUNC)


def resolve_warmup(spec: str, engine: Warmup, release: str, library: Callable[[], WarmupSource]) -> WarmupSource:
    """Turn `--warmup` into a callable: `engine` is the engine's own warm-up (modelled on `release`), `library` the
    prefill backend's (asked only for `library`); problems are one line."""
    if spec == "none":
        return WarmupSource("none", None)
    if spec == "engine":
        modelled = (Site(engine.function, engine.models.text(release)),) if engine.models is not None else ()
        return WarmupSource(f"engine: {engine.label}", engine.function, modelled)
    if spec == "library":
        return library()
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise MlacheckError(f"--warmup {spec!r}: use library, none, PATH.py:FUNC or pkg.module:FUNC")
    module = _load_file(spec, Path(where)) if where.endswith(".py") else _import(spec, where)
    function = getattr(module, name, None)
    if not callable(function):
        raise MlacheckError(f"--warmup {spec}: {_not_a_function(module, where, name)}")
    return WarmupSource(spec, function, users=True)


def _not_a_function(module: object, where: str, name: str) -> str:
    """Why `where`'s `name` cannot be the warm-up: it has no such name, or it names something else (`x = 3`)."""
    if not hasattr(module, name):
        return f"{where} has no function {name!r}"
    kind = type(getattr(module, name)).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"{name} is {article} {kind}, not a function; name the warm-up function"


def library_warmup(prefill: RuleFile | None) -> WarmupSource:
    """`--warmup library` of a family whose rule names its warm-up function."""
    family = prefill.family if prefill is not None else None
    if family is None or family.warmup is None:
        raise MlacheckError("--warmup library: the prefill family's rule file names no warmup function; pick another")
    function = getattr(_import("library", family.module), family.warmup, None)
    if not callable(function):
        raise MlacheckError(
            f"--warmup library: {family.module} has no function {family.warmup!r}; re-check the rule file"
        )
    path, lines = span(function)
    called = f"{short_path(path)}:{lines.start} {function.__qualname__} (called by --warmup library)"
    return WarmupSource(
        f"library: {family.module}.{family.warmup}", _library_warmup(function), (Site(_library_warmup, called),)
    )


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
