"""What code a family's key depends on, as installed: a fingerprint of its functions, the distribution's version,
and which distributions install the family's package (a fork can install the same import name)."""

from __future__ import annotations

from collections.abc import Sequence

from mlacheck.capture.install import Patches
from mlacheck.capture.installed import answer
from mlacheck.errors import MlacheckError


def fingerprint(module: object, key_functions: list[str]) -> str | None:
    """sha256 over the signature and source of the functions the key depends on (None where unreadable or none)."""
    if not key_functions:
        return None
    import hashlib  # here: a family without key functions loads neither (a watched import, in every process)
    import inspect

    digest, patches = hashlib.sha256(), Patches("fingerprint")
    try:
        for name in key_functions:
            function = inspect.unwrap(patches.resolve(module, name))
            digest.update(f"{name}{inspect.signature(function)}\n{inspect.getsource(function)}".encode())
    except (OSError, TypeError, ValueError, MlacheckError):
        return None
    return digest.hexdigest()[:16]


def unreadable_key_function(module: object, key_functions: list[str]) -> str | None:
    """Why the fingerprint of the key functions cannot be computed (the first that cannot be read), or None: a
    key function renamed away or without source (a compiled or .pyc-only build) leaves the rule unverified, never
    "unchanged"."""
    if not key_functions:
        return None
    import inspect

    patches = Patches("fingerprint")
    for name in key_functions:
        try:
            function = inspect.unwrap(patches.resolve(module, name))
        except MlacheckError:
            return (
                f"key function {name!r} is not in the installed {getattr(module, '__name__', module)}: the fingerprint "
                "of the code the key depends on cannot be computed, so the rule may no longer describe the key "
                "(re-check the rule's key_functions)"
            )
        try:
            inspect.signature(function)
            inspect.getsource(function)
        except (OSError, TypeError, ValueError) as exc:
            return (
                f"key function {name!r} has no readable source ({type(exc).__name__}: {exc}): the fingerprint of the "
                "code the key depends on cannot be computed, so the rule may no longer describe the key"
            )
    return None


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` (None where it is not installed); asked once (installed.py)."""
    return answer(f"version {distribution}", lambda: _version(distribution))


def _version(distribution: str) -> str | None:
    from importlib import metadata  # slow to import; only a family's install needs it

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def providers(package: str) -> list[str]:
    """ "name version" of each installed distribution that provides the top-level `package`."""
    named = answer(
        f"providers {package}", lambda: [f"{name} {installed_version(name)}" for name in distributions_of(package)]
    )
    return list(named)


def distributions_of(package: str) -> tuple[str, ...]:
    """The installed distributions that provide the top-level `package`, by the names their top_level.txt lists, else
    by their RECORD (what `importlib.metadata.packages_distributions` reads, for one package: it parses every
    distribution's metadata and files, several times slower, in every observed process that imports a watched
    library); asked once (installed.py)."""
    return tuple(answer(f"distributions {package}", lambda: _distributions_of((package,))[package]))


def ask_distributions(packages: Sequence[str]) -> None:
    """`distributions_of` each of `packages` answered from one pass over the distributions' metadata (where any is not
    answered yet), not one pass a package: the supervisor's `watch.ask_ahead`."""
    found: dict[str, list[str]] = {}

    def ask(package: str) -> list[str]:
        if not found:  # the first question not answered yet reads the metadata for them all
            found.update(_distributions_of(packages))
        return found[package]

    for package in packages:
        answer(f"distributions {package}", lambda package=package: ask(package))


def _distributions_of(packages: Sequence[str]) -> dict[str, list[str]]:
    from importlib import metadata

    names: dict[str, list[str]] = {package: [] for package in packages}
    for dist in metadata.distributions():
        top = dist.read_text("top_level.txt")
        if top is not None:
            provided = [package for package in top.split() if package in names]
        else:
            record = "\n" + (dist.read_text("RECORD") or "")
            provided = [package for package in names if f"\n{package}/" in record or f"\n{package}.py," in record]
        if provided:
            name = dist.metadata["Name"]
            for package in provided:
                names[package].append(name)
    return {package: list(dict.fromkeys(found)) for package, found in names.items()}
