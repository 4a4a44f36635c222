"""A post-import hook: a meta path finder that lets the other finders find a watched module, then has its loader call
a hook with the module once the module has run (the agent installs a family's capture there). Imports nothing."""

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

    def __init__(self, modules: set[str], hook) -> None:
        self.modules, self.hook = modules, hook

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = LoaderWithHook(spec.loader, self.hook)
                return spec
        return None
