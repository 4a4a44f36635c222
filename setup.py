"""The build's additions to pyproject.toml: mlacheck-startup.pth, installed at the top of site-packages by
`pip install .` and `pip install -e .` alike, and the module it calls, mlacheck_startup (a top-level module, so that
a process of no run imports nothing of the mlacheck package). The line starts program mode's agent at interpreter
start in a process that belongs to an mlacheck run, and does next to nothing in any other (docs/security.md)."""

import os

from setuptools import Command, setup
from setuptools.command.build import build

PTH = "mlacheck-startup.pth"


class BuildPth(Command):
    """Copy the .pth where the wheel's top level is built: build_lib, or for an editable wheel the wheel's own
    top level (`install_lib` there), which setuptools fills with what an editable install adds to site-packages."""

    description = f"put {PTH} at the top of the installed files"
    user_options = []

    def initialize_options(self) -> None:
        self.build_lib = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build", ("build_lib", "build_lib"))

    def _target(self) -> str:
        top = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        return os.path.join(top, PTH)

    def run(self) -> None:
        self.copy_file(PTH, self._target())

    def get_outputs(self) -> list[str]:
        return [self._target()]

    def get_output_mapping(self) -> dict[str, str]:
        return {self._target(): PTH}


class Build(build):
    sub_commands = [*build.sub_commands, ("build_pth", None)]


setup(cmdclass={"build": Build, "build_pth": BuildPth}, py_modules=["mlacheck_startup"])
