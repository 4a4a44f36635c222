"""Tritons found by their layout, not by their name (issue 28): a package laid out as Triton is (`post_import.
triton_shaped`: a vendored copy, a fork) under an import name that no rule file's `[triton]` table lists gets the same
capture as a listed Triton, made from the table of stock `triton` (else the first `[triton]` table) with the package's
own import name: its kernels are `<name>:<module>.<qualname>`, its version its own `__version__`. Looked for only where
the rules watch a Triton at all. The context says which table it took (`runtime.FOUND`), so the analysis judges its
kernels by that table; one that cannot be captured (a Triton whose runtime lacks what the capture reads, as Tritons
before knobs.py) is an `unseen` line naming it: the run cannot pass, its compiles unseen."""

from __future__ import annotations

import sys
from collections.abc import Callable

from mlacheck.events import context_event, unseen_event
from mlacheck.program.post_import import by_path, triton_shaped

JIT = ".runtime.jit"  # a Triton's runtime module, under its package


def hook(agent) -> Callable | None:
    """The finder's hook for a Triton-shaped package (None where the rules watch no Triton: nothing is looked for)."""
    if not agent.watchers:
        return None
    return lambda module: agent._safely(lambda: watch(agent, module))


def start(agent) -> None:
    """At the agent's start: the Triton-shaped packages imported before it, and those loaded by path from now on."""
    rescan(agent)
    if agent.watchers:
        by_path(lambda module: agent._safely(lambda: take(agent, module)), agent._observing)


def rescan(agent, late: str = "") -> None:
    """The Triton-shaped packages in sys.modules (their runtime module loaded) that no capture of the agent has: one
    imported before the agent started, or loaded past its finder (by path, from a zip). `late`: when this scan runs
    after serving start (at a counts flush, at exit): what such a package compiled until now was not seen (`unseen`)."""
    if not agent.watchers:
        return
    for name in [name.removesuffix(JIT) for name in list(sys.modules) if name.endswith(JIT)]:
        module = sys.modules.get(name)
        if name in agent.captures or _listed_elsewhere(agent, name) or not _shaped(name, module):
            continue
        if late:
            agent.sink.write(
                unseen_event(
                    name,
                    f"{name} (at {getattr(module, '__file__', None)}) is laid out as Triton is and was loaded past "
                    f"mlacheck's import hook (by path, or from a zip), found only {late}: what it compiled on the "
                    "serving path until then was not seen",
                )
            )
        agent._safely(lambda module=module: take(agent, module))


def take(agent, module) -> None:
    """A Triton-shaped package found: a module the agent watches, as the agent takes it at its import; else `watch`."""
    if module.__name__ in agent._finder.modules:
        agent._imported(module)
    else:
        watch(agent, module)


def _listed_elsewhere(agent, name: str) -> bool:
    """A module the agent watches, but not as a Triton (its families, its serving start): taken at its import only."""
    return name in agent._finder.modules and name not in agent.watchers


def _shaped(name: str, module: object) -> bool:
    """Laid out as Triton is: read from its folder, or (a zip's) from its parts loaded beside its runtime module."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and triton_shaped(spec):
        return True
    return module is not None and all(f"{name}.{part}" in sys.modules for part in ("language", "compiler"))


def watch(agent, module) -> None:
    """Watch the Triton `module` as a listed one is watched; say so where it cannot be."""
    from mlacheck.capture.triton.runtime import FOUND

    name = module.__name__
    if name in agent.captures:
        return
    if name not in agent.watchers:
        template = agent.watchers.get("triton") or next(iter(agent.watchers.values()))
        rule = {**template["rule"], "module": name, "distribution": name}
        rule["description"] = f"every kernel of {name}, a Triton found by its layout, as {template['module']}'s"
        agent.watchers[name] = {**template, "module": name, "rule": rule, "like": template["module"]}
    agent.sink.write(context_event({FOUND + name: agent.watchers[name]["like"]}))
    try:
        agent._watch(name)
    except Exception as exc:  # noqa: BLE001 - said as what capture could not see
        agent.sink.write(
            unseen_event(
                name,
                f"{name} (at {getattr(module, '__file__', None)}) is laid out as Triton is, but its capture could "
                f"not be installed ({type(exc).__name__}: {exc}): the kernels it compiles are not watched",
            )
        )
