"""What a hook in one of Triton's slots holds (`capture/triton/slots.py: _reaches`: whether it calls mlacheck's, read
without calling it), the guarded listener slot (`slots.py: Outermost`: mlacheck's on top, whatever is put there),
which packages are laid out as Triton is (`program/post_import.py: triton_shaped`, `by_path`; `program/found.py`), and
how the kernels made before install are found (`capture/triton/capture.py: instances`)."""

import collections
import functools
import gc
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager

from mlacheck.capture.triton.capture import instances
from mlacheck.capture.triton.slots import Outermost, _not_reentered, _reaches
from mlacheck.program import found
from mlacheck.program.post_import import by_path, triton_shaped


def ours(**kwargs):
    return "ours"


previous = ours  # a script's way: the hook it found, kept in a module global


def by_global(**kwargs):
    return previous(**kwargs)


class Monitor:
    def __init__(self, before):
        self.before = before

    def hook(self, **kwargs):
        return self.before(**kwargs)


def test_a_hook_that_holds_mlacheck_s_is_read_as_chained_however_it_holds_it():
    existing = ours
    closure = lambda **kwargs: existing(**kwargs)  # noqa: E731 - vLLM's jit_monitor keeps it in its closure
    on_top = lambda **kwargs: closure(**kwargs)  # noqa: E731 - two chained on top
    for holder in (
        ours,
        closure,
        on_top,
        by_global,
        Monitor(ours).hook,
        functools.partial(Monitor.hook, Monitor(ours)),
    ):
        assert _reaches(holder, ours), holder


def test_a_hook_that_does_not_hold_mlacheck_s_is_read_as_replacing_it():
    for holder in (None, lambda **kwargs: None, print, Monitor(print).hook, by_global.__code__):
        assert not _reaches(holder, ours), holder


def test_what_the_slot_held_is_called_once_where_it_calls_mlacheck_s_hook_again():
    calls = []

    def theirs(**kwargs):
        calls.append("theirs")
        return guarded(**kwargs)  # it calls mlacheck's hook, which calls it again

    guarded = _not_reentered(theirs)
    assert guarded(x=1) is None and calls == ["theirs"]
    assert _not_reentered(None) is None


def test_a_package_laid_out_as_triton_is_found_by_its_folders(tmp_path):
    def spec(name, parts):
        folder = tmp_path / name
        for part in parts:
            (folder / part).parent.mkdir(parents=True, exist_ok=True)
            (folder / part).write_text("") if "." in part else (folder / part).mkdir(exist_ok=True)
        found = importlib.machinery.ModuleSpec(name, None, is_package=True)
        found.submodule_search_locations = [str(folder)]
        return found

    assert triton_shaped(spec("vendored", ["language/__init__.py", "compiler/__init__.py", "runtime/jit.py"]))
    assert not triton_shaped(spec("no_jit", ["language/x.py", "compiler/x.py", "runtime/driver.py"]))
    assert not triton_shaped(spec("no_compiler", ["language/x.py", "runtime/jit.py"]))
    assert not triton_shaped(importlib.machinery.ModuleSpec("module", None))  # a module, not a package


class Compilation:
    """A knobs group as Triton's `compilation_knobs` is (its listener a class attribute, `scope()` its `__dict__`)."""

    listener = None

    @contextmanager
    def scope(self):
        saved = dict(self.__dict__)
        yield
        self.__dict__.clear()
        self.__dict__.update(saved)


def guarded_group(watched: list):
    """A group whose listener slot is guarded by a hook that notes each compile it watches, then calls the inner one
    (as `compiles.py: _compilation_listener` does, once per compile)."""
    passing = []

    def ours(inner, kwargs):
        if not passing or passing[-1] is not kwargs["src"]:
            watched.append(kwargs["src"])
        passing.append(kwargs["src"])
        try:
            return inner(**kwargs) if inner is not None else None
        finally:
            passing.pop()

    group = type("Guarded", (Compilation,), {})()
    type(group).listener = Outermost("listener", ours, None)
    return group


def test_whatever_the_program_puts_in_the_guarded_slot_runs_below_mlacheck_s_hook_once_per_compile():
    watched, calls = [], []
    group = guarded_group(watched)
    group.listener(src="warm")  # nothing of the program's there yet
    holder = types.SimpleNamespace(downstream=group.listener)  # holds what the slot gave, never calls it
    group.listener = lambda **kwargs: calls.append(("logger", kwargs["src"]))
    group.listener(src="held")
    previous = group.listener

    def chained(**kwargs):
        calls.append(("chained", kwargs["src"]))
        return previous(**kwargs)  # what it read from the slot: mlacheck's, on top of the logger

    group.listener = chained
    group.listener(src="chained")
    assert watched == ["warm", "held", "chained"] and holder.downstream.inner is None
    assert calls == [("logger", "held"), ("chained", "chained"), ("logger", "chained")]
    assert group.__dict__["listener"] is chained and group.listener is group.listener  # the program's, kept as is
    group.listener = previous  # putting back what it read gives back the program's own (the logger)
    assert group.__dict__["listener"] is previous.inner


def test_a_listener_swapped_in_and_back_by_scope_is_below_mlacheck_s_hook():
    watched, calls = [], []
    group = guarded_group(watched)
    with group.scope():
        group.listener = lambda **kwargs: calls.append(kwargs["src"])
        group.listener(src="scoped")
    group.listener(src="after")
    assert watched == ["scoped", "after"] and calls == ["scoped"] and group.listener.inner is None


def test_a_triton_shaped_package_loaded_by_path_is_handed_to_the_hook(tmp_path, monkeypatch):
    real = importlib._bootstrap_external.spec_from_file_location  # (undone after the test, whatever wrapped it)
    monkeypatch.setattr(importlib.util, "spec_from_file_location", real)
    for part in ("language/__init__.py", "compiler/__init__.py", "runtime/__init__.py", "runtime/jit.py"):
        (tmp_path / "by_path_triton" / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "by_path_triton" / part).write_text("")
    (tmp_path / "by_path_triton" / "__init__.py").write_text("")
    hooked = []
    by_path(hooked.append, lambda: True)
    spec = importlib.util.spec_from_file_location("by_path_triton", tmp_path / "by_path_triton" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hooked == [module]
    plain = importlib.util.spec_from_file_location("by_path_plain", tmp_path / "by_path_triton" / "runtime" / "jit.py")
    assert type(plain.loader) is importlib.machinery.SourceFileLoader  # a module, not a package: left as it is


class Agent:
    """What `found.rescan` reads of the agent."""

    def __init__(self):
        self.watchers = {"triton": {"module": "triton", "rule": {}}}
        self.captures, self.written, self.taken = {"triton": []}, [], []
        self._finder = types.SimpleNamespace(modules={"triton"})
        self.sink = types.SimpleNamespace(write=self.written.append)

    def _safely(self, action):
        action()


def test_a_triton_found_in_sys_modules_after_serving_start_is_named_unseen(monkeypatch):
    agent = Agent()
    agent.captures.update(
        {name.removesuffix(".runtime.jit"): [] for name in sys.modules if name.endswith(".runtime.jit")}
    )
    package = types.ModuleType("late_triton")  # (the Tritons other tests imported: captured already)
    package.__spec__ = None
    monkeypatch.setitem(sys.modules, "late_triton", package)
    for part in ("runtime.jit", "language", "compiler"):
        monkeypatch.setitem(sys.modules, f"late_triton.{part}", types.ModuleType(f"late_triton.{part}"))
    monkeypatch.setattr(found, "watch", lambda agent, module: agent.taken.append(module))
    found.rescan(agent)  # at serving start: taken, nothing said
    assert agent.taken == [package] and agent.written == []
    found.rescan(agent, "at exit")  # (still not captured: the fake watch did not add it)
    [line] = agent.written
    assert line["type"] == "unseen" and "found only at exit" in str(line), line


class Kernel:
    def __init__(self, name):
        self.name = name


class Tuned(Kernel):
    __slots__ = ("key",)


def test_every_instance_is_found_however_it_was_made_and_held_in_the_order_of_a_walk_of_every_object():
    """Made by its class, without __init__ (copy, pickle), of a subclass (with __slots__), held only in a container,
    in a cycle or nowhere but a frame's local: each found once, as a walk of every object finds them (the same objects,
    in the same order); an object that only holds a class is not one; a class made in C (not a heap type: its
    instances do not refer to it) is looked for among every object."""
    held = [Kernel("listed"), {"deep": (Kernel.__new__(Kernel), Tuned("tuned"))}]
    cycle = Kernel("cycle")
    cycle.me = cycle
    local, classes = Kernel("local"), {Kernel, Tuned}
    walked = [thing for thing in gc.get_objects() if type(thing) in classes]
    found = instances(classes)
    assert [id(thing) for thing in found] == [id(thing) for thing in walked]
    assert {id(thing) for thing in [held[0], *held[1]["deep"], cycle, local]} <= {id(thing) for thing in found}
    assert all(type(thing) in classes for thing in found)
    ordered = collections.OrderedDict(a=1)  # a C type of the interpreter's own, not a heap type
    assert any(thing is ordered for thing in instances({collections.OrderedDict}))
