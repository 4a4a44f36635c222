"""The engines the scenario replays: every module of this package is one engine (or one engine's releases), found
here by its `ENGINES`. A new engine or release is a module of its own; nothing else lists it. The modules import
none of each other (pyproject.toml's import contract)."""

from __future__ import annotations

import importlib
import pkgutil

from mlacheck.errors import SETTING, MlacheckError
from mlacheck.scenario.engine import Engine, PrefillPath


def _discovered() -> dict[str, Engine]:
    engines: dict[str, Engine] = {}
    for module in pkgutil.iter_modules(__path__):
        for engine in importlib.import_module(f"{__name__}.{module.name}").ENGINES:
            engines[engine.name] = engine
    return dict(sorted(engines.items()))


ENGINES = _discovered()


def engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise MlacheckError(f"{SETTING}: choose one of {', '.join(ENGINES)}", "profile", name) from None


def prefill_path(engine: Engine, backend: str) -> PrefillPath:
    """How the engine runs a prefill backend. A backend it never runs as modelled is refused in one line, naming what
    the engine does instead and the profiles that model that backend: another engine's start-up replayed under this
    one would warm variants this engine never warms (a false PASS) or miss those it does."""
    own = engine.prefill.get(backend)
    if own is not None:
        return own
    modelling = [other.name for other in ENGINES.values() if backend in other.prefill]
    instead = engine.unmodelled.get(backend, f"{engine.release} is not modelled with it")
    either = " or ".join([", ".join(modelling[:-1]), *modelling[-1:]] if len(modelling) > 1 else modelling)
    where = f"--profile {either} models it" if modelling else "no profile models it"
    raise MlacheckError(f"--prefill-backend {backend}: {instead}; {where}")
