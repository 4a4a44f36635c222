"""The engines the scenario replays: every module of this package is one engine (or one engine's releases), found
here by its `ENGINES`. A new engine or release is a module of its own; nothing else lists it. The modules import
none of each other (pyproject.toml's import contract)."""

from __future__ import annotations

import importlib
import pkgutil

from mlacheck.errors import MlacheckError
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
        raise MlacheckError(f"--profile {name}: choose one of {', '.join(ENGINES)}") from None


def prefill_path(engine: Engine, backend: str) -> PrefillPath:
    """How the engine runs a prefill backend: its own path, or for one its code never calls, the path of the engine
    whose default that backend is, replayed without a line of that engine to name (`PrefillPath.borrowed`)."""
    own = engine.prefill.get(backend)
    if own is not None:
        return own
    donor = next((other for other in ENGINES.values() if other.prefill_backend == backend), None)
    if donor is None:
        raise MlacheckError(f"--prefill-backend {backend}: no engine modelled runs it; choose the profile's own")
    return donor.prefill[backend].borrowed()
