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
from mlacheck.program.post_import import triton_shaped

JIT = ".runtime.jit"  # a Triton's runtime module, under its package


def hook(agent) -> Callable | None:
    """The finder's hook for a Triton-shaped package (None where the rules watch no Triton: nothing is looked for)."""
    if not agent.watchers:
        return None
    return lambda module: agent._safely(lambda: watch(agent, module))


def already_imported(agent) -> None:
    """The Triton-shaped packages imported before the agent started (their runtime module is loaded)."""
    if agent.watchers:
        for name in [name.removesuffix(JIT) for name in list(sys.modules) if name.endswith(JIT)]:
            module = sys.modules.get(name)
            spec = getattr(module, "__spec__", None)
            if spec is not None and name not in agent._finder.modules and triton_shaped(spec):  # (listed: the agent's)
                agent._safely(lambda module=module: watch(agent, module))


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
