"""Copies of a netted builder under another module name: a library that ships its own copy of torch's cpp_extension.py
(AITER: aiter/jit/utils/cpp_extension.py) builds through that copy's functions, which no rule names. A `[[compile_net]]`
with `copies` names the module-level functions any one of which, defined in a module of another name (not imported
into it), makes that module a copy of the net's (a fork may rename the others); the copy's function of the net's name,
where it is defined there and takes the parameters the net reads, is netted as the original is, its label naming the
copy. A copy run by path (runpy.run_path, exec) is no module: it is not looked for (finding one means walking every
object of the heap at serving start); the compiler processes its builds start are (`compiler_processes`).

What was imported by the time the process marks serving start is looked at then, and netted from then on; serving
start is where a net's compiles begin to count (before it, a compile outside the engines' warm-up frames has an
unknown phase). A copy found at exit that was not netted (imported after the mark, or in a process that never marked
it) is an `unseen` line: its builds were not watched, so the run cannot pass."""

from __future__ import annotations

import inspect
import sys
import types

from mlacheck import events
from mlacheck.capture.policy import CapturePolicy
from mlacheck.rulefiles import plain
from mlacheck.rulefiles.plain import CompileNet, PhaseRule
from mlacheck.sinks import EventSink


class CopyNets:
    """The nets on the copies of one process's netted builders."""

    def __init__(
        self, nets: dict[str, list[dict]], sink: EventSink, policy: CapturePolicy, phases: tuple[PhaseRule, ...]
    ) -> None:
        """`nets`: capture.json's compile nets (by module); those with `copies` are looked for."""
        self.rules = [plain.compile_net(data) for datas in nets.values() for data in datas if data.get("copies")]
        self.sink, self.phases, self.replace_launch = sink, phases, policy.replace_launch
        self.nets: dict[tuple[int, str], object] = {}  # (id of the copy, the rule's function) -> its CompileNetCapture
        self.installed = bool(self.rules)

    def serving_started(self) -> None:
        """Net the copies imported by now; their compiles from now on are serving."""
        from mlacheck.capture.compile_net import CompileNetCapture  # (only where a copy is found)

        for module, rule in self._found():
            capture = CompileNetCapture(_copied(rule, module.__name__), self.sink, self.phases, self.replace_launch)
            self.nets[(id(module), rule.function)] = capture
            capture.install(module)
            capture.serving_started()

    def remove(self) -> None:
        """Name each copy that was not netted (`unseen`), then take the nets off (each says what went past it)."""
        named = set()
        for module, rule in self._found():
            if (module.__name__, rule.module) not in named:
                named.add((module.__name__, rule.module))
                self.sink.write(
                    events.unseen_event(
                        rule.label,
                        f"{module.__name__} is a copy of {rule.module} (it defines {rule.qualname}), imported "
                        "after this process marked serving start or in a process that never marked it, so it was not "
                        "netted: what it built was not watched (mark serving start after it is imported)",
                        net=True,
                    )
                )
        for capture in self.nets.values():
            capture.remove()
        self.nets = {}

    def phase_changed(self) -> None:
        """Copies are looked for at serving start."""

    def after_fork(self) -> None:
        """A forked child keeps the nets its parent put on."""

    def _found(self) -> list[tuple[object, CompileNet]]:
        """(module, rule) of each copy imported now and not netted."""
        found = []
        for name, module in list(sys.modules.items()):  # (a copy: another thread may import)
            if not isinstance(module, types.ModuleType):  # (an object standing in for a module: not looked into)
                continue
            namespace = module.__dict__
            for rule in self.rules:
                if (
                    name != rule.module
                    and (id(module), rule.function) not in self.nets
                    and any(_defined(namespace.get(function), name) for function in rule.copies)
                    and _takes(namespace.get(rule.qualname), name, rule)
                ):
                    found.append((module, rule))
        return found


def _defined(value: object, module: str) -> bool:
    """Whether `value` is a function defined in `module` (not one imported there: its `__module__` is another's)."""
    return inspect.isfunction(value) and value.__module__ == module


def _takes(value: object, module: str, rule: CompileNet) -> bool:
    """Whether `value` is the copy's function of the rule's name, defined in `module`, with the parameters the rule
    reads (`kernel`, `output`): a function of that name in a module that is no copy is left alone."""
    if not _defined(value, module):
        return False
    parameters = inspect.signature(value).parameters
    return all(path.partition(".")[0] in parameters for path in (rule.kernel, rule.output) if path)


def _copied(rule: CompileNet, module: str) -> CompileNet:
    """The rule's net, on the copy `module`: its label names the copy; the copy's package is never a compile's site."""
    return CompileNet(
        function=f"{module}:{rule.qualname}",
        label=f"{rule.label}, copied as {module}",
        kernel=rule.kernel,
        site_skip=(*rule.site_skip, module.partition(".")[0]),
        output=rule.output,
        copies=(),
    )
