"""What a hook in one of Triton's slots holds (`capture/triton/slots.py: _reaches`: whether it calls mlacheck's, read
without calling it), and which packages are laid out as Triton is (`program/post_import.py: triton_shaped`)."""

import functools
import importlib.machinery

from mlacheck.capture.triton.slots import _not_reentered, _reaches
from mlacheck.program.post_import import triton_shaped


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
