"""A post-import hook: a meta path finder that lets the other finders find a watched module, then has its loader call
a hook with the module once the module has run (the agent installs a family's capture there); and, where the agent
looks for them, the same for every package laid out as Triton is, whatever its import name (`triton_shaped`: a
vendored copy, a fork no rule file lists), the finder's or one loaded by path (`by_path`). Imports nothing at import
(importlib.util, where `by_path` is asked)."""

import os
import sys


class LoaderWithHook:
    """Runs the module as its own loader would, then calls the hook with it."""

    def __init__(self, loader, hook) -> None:
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._hook(module)


class PostImportFinder:
    """Finds the watched modules through the other finders and wraps their loader with the hook."""

    def __init__(self, modules: set[str], hook, shaped=None) -> None:
        self.modules, self.hook = modules, hook
        self.shaped = shaped  # the hook of a Triton-shaped package not in `modules` (None: not looked for)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.modules and self.shaped is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                hook = self.hook if fullname in self.modules else self.shaped if triton_shaped(spec) else None
                if hook is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = LoaderWithHook(spec.loader, hook)
                return spec
        return None


def triton_shaped(spec) -> bool:
    """Whether a package is laid out as Triton is (`language/`, `compiler/`, `runtime/jit.*`), read from its folder
    before it runs: a few stats of a package's import, none of a module's."""
    try:
        for folder in list(spec.submodule_search_locations or ())[:1]:
            runtime = os.path.join(folder, "runtime")
            if all(os.path.isdir(os.path.join(folder, part)) for part in ("language", "compiler", "runtime")):
                return any(name.startswith("jit.") for name in os.listdir(runtime))
    except (OSError, TypeError):  # a folder that cannot be read: not looked at (the import goes on as it would)
        return False
    return False


def by_path(hook, observing) -> None:
    """A package laid out as Triton is, loaded by path (`importlib.util.spec_from_file_location`, then the loader's
    `exec_module`, as a vendoring shim or a plugin loader does: no finder is asked) gets its loader wrapped with the
    hook as the finder's are (while `observing()`). `importlib.util`'s function is replaced once."""
    import importlib.util

    real = importlib.util.spec_from_file_location
    if getattr(real, "_mlacheck_by_path", False):
        return

    def spec_from_file_location(*args, **kwargs):
        spec = real(*args, **kwargs)
        loader = getattr(spec, "loader", None)
        if hasattr(loader, "exec_module") and spec.submodule_search_locations and observing() and triton_shaped(spec):
            spec.loader = LoaderWithHook(loader, hook)
        return spec

    spec_from_file_location._mlacheck_by_path = True
    spec_from_file_location.__wrapped__ = real
    importlib.util.spec_from_file_location = spec_from_file_location
