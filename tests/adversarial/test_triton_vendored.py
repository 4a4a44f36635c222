"""A Triton under an import name no rule file lists (issue 28: Triton by its layout, not by its name). A library that
ships its own copy of Triton compiled a new variant on the serving path and the run passed, nothing said (red-team,
mlacheck 0.7.3): only the Tritons the `[triton]` tables name were watched. Every package laid out as Triton is gets
the same capture now; one that cannot be captured is said, and the run cannot pass."""

import os
import sys

import pytest

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program
from tests.fixtures import vendored_triton

OPTIONS = ("--dry", "--compile", "skip", "--arch", "sm_90a")
STOCK = """
import torch, mlacheck, triton, triton.language as tl


@triton.jit
def clean(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


x, y = torch.zeros(4096), torch.zeros(4096)
clean[(1,)](x, y, 64, BLOCK=64)  # warm-up, served as warmed up: stock Triton alone passes
"""
VENDORED = (
    STOCK
    + """
import os, sys
sys.path.insert(0, "FOLDER")
os.environ["TRITON_BACKENDS_IN_TREE"] = "1"  # the copy finds its backends in its own tree
import shipped_triton, shipped_triton.language as stl
from shipped_triton.backends.compiler import GPUTarget


class Driver:  # what a GPU machine's driver answers, where no mlacheck --dry driver does
    def get_current_target(self): return GPUTarget("cuda", 90, 32)
    def get_current_device(self): return "gpu0"
    def get_current_stream(self, device=None): return 0
    def get_active_torch_device(self): return torch.device("cpu")


import importlib
driver = importlib.import_module("shipped_triton.runtime.driver").driver
if driver._active is None:
    driver.set_active(Driver())


@shipped_triton.jit
def shipped(x_ptr, y_ptr, n, BLOCK: stl.constexpr):
    offs = stl.arange(0, BLOCK)
    stl.store(y_ptr + offs, stl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


shipped.run(x, y, 64, BLOCK=64, grid=(1,), warmup=True)  # warm-up
mlacheck.serving_started()
clean[(1,)](x, y, 64, BLOCK=64)
shipped.run(x, y, 64, BLOCK=BLOCK_SERVED, grid=(1,), warmup=True)  # compiles on the serving path where it is new
print("done")
"""
)
ENV = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    "TRITON_DEFAULT_FP_FUSION": "1",
}


@pytest.fixture(scope="module")
def copy_folder(tmp_path_factory):
    if not vendored_triton.available():
        pytest.skip("no tokenspeed_triton installed to copy")
    folder = tmp_path_factory.mktemp("vendored")
    vendored_triton.vendored_copy(folder, "shipped_triton")
    return folder


def run(tmp_path, text: str):
    env = {**ENV, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=None, options=OPTIONS, env=env)
    assert "done" in result.stdout, result.stdout + result.stderr
    return result


def test_a_vendored_triton_s_serving_path_compile_is_mla001(tmp_path, copy_folder):
    text = VENDORED.replace("FOLDER", str(copy_folder)).replace("BLOCK_SERVED", "128")
    result = run(tmp_path, text)
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["family"] == "shipped_triton:__main__.shipped", finding
    assert finding["diff"] == {"BLOCK": ["constexpr 64", "constexpr 128"]}, finding
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_vendored_triton_served_as_warmed_up_passes(tmp_path, copy_folder):
    """The control: its kernel watched, counted and clean; the run passes."""
    result = run(tmp_path, VENDORED.replace("FOLDER", str(copy_folder)).replace("BLOCK_SERVED", "64"))
    assert_pass(result)
    assert "shipped_triton:__main__.shipped" in {family["name"] for family in result.report["families"]}


OLD_LAYOUT = {  # Triton before knobs.py (<= 3.3): its hooks were JITFunction's class attributes
    "__init__.py": "from .runtime.jit import JITFunction\n",
    "language/__init__.py": "",
    "compiler/__init__.py": "",
    "runtime/__init__.py": "",
    "runtime/jit.py": "class JITFunction:\n    cache_hook = None\n",
}


def test_a_triton_shaped_package_that_cannot_be_captured_is_named_and_cannot_pass(tmp_path):
    for relative, text in OLD_LAYOUT.items():
        (tmp_path / "lib" / "old_triton" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / "old_triton" / relative).write_text(text)
    text = STOCK + f"sys.path.insert(0, {str(tmp_path / 'lib')!r})\nimport old_triton\n"
    text += "mlacheck.serving_started()\nclean[(1,)](x, y, 64, BLOCK=64)\nprint('done')\n"
    result = run(tmp_path, text.replace("import torch,", "import sys, torch,"))
    assert_not_pass(result, "incomplete")
    [reason] = [line for line in result.report["incomplete"] if "old_triton" in line]
    assert "is laid out as Triton is, but its capture could not be installed" in reason, reason
    assert "old_triton.knobs" in reason, reason


BY_PATH = {  # how a vendoring shim or a plugin loader loads a package by path, no finder asked
    "spec_from_file_location": """
import importlib.util
def load(name, folder):
    spec = importlib.util.spec_from_file_location(name, f"{folder}/{name}/__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
""",
    "past the finder": """
import importlib.machinery, importlib.util
def load(name, folder):  # its own loader: neither mlacheck's finder nor spec_from_file_location is asked
    loader = importlib.machinery.SourceFileLoader(name, f"{folder}/{name}/__init__.py")
    spec = importlib.util.spec_from_loader(name, loader, is_package=True)
    spec.submodule_search_locations.append(f"{folder}/{name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
""",
}


def by_path(text: str, how: str, folder, name: str) -> str:
    """`text` with its `import NAME` made a load by path (the loader put at the program's start)."""
    head = BY_PATH[how] + "import sys, os\n"
    return head + text.replace(f"import {name},", f"{name} = load({name!r}, {str(folder)!r}); import")


def test_a_vendored_triton_loaded_by_path_is_found_and_its_serving_path_compile_is_mla001(tmp_path, copy_folder):
    """Red-team 14 #7: the vendored copy loaded by `spec_from_file_location` + `exec_module` (0.8.0 passed): captured
    as it is at an import, from its load on."""
    text = VENDORED.replace("FOLDER", str(copy_folder)).replace("BLOCK_SERVED", "128")
    result = run(tmp_path, by_path(text, "spec_from_file_location", copy_folder, "shipped_triton"))
    assert_not_pass(result, "fail")
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["family"] == "shipped_triton:__main__.shipped", finding
    assert finding["diff"] == {"BLOCK": ["constexpr 64", "constexpr 128"]}, finding
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_triton_loaded_past_the_finder_before_serving_start_is_found_then(tmp_path):
    """An old-layout Triton loaded by a loader of the program's own (no finder, no spec_from_file_location): found by
    the look at serving start, named, and the run cannot pass."""
    for relative, text in OLD_LAYOUT.items():
        (tmp_path / "lib" / "old_triton" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / "old_triton" / relative).write_text(text)
    text = STOCK + f"old_triton = load('old_triton', {str(tmp_path / 'lib')!r})\n"
    text += "mlacheck.serving_started()\nclean[(1,)](x, y, 64, BLOCK=64)\nprint('done')\n"
    result = run(tmp_path, BY_PATH["past the finder"] + "import sys\n" + text)
    assert_not_pass(result, "incomplete")
    [reason] = [line for line in result.report["incomplete"] if "old_triton" in line]
    assert "is laid out as Triton is, but its capture could not be installed" in reason, reason


def test_a_triton_loaded_past_the_finder_after_serving_start_is_named_and_cannot_pass(tmp_path, copy_folder):
    """The vendored copy loaded past the finder after serving start, a new variant compiled: found at a counts flush or
    at exit, what it compiled until then unseen: INCOMPLETE (or FAIL where a flush found it first), never PASS."""
    text = VENDORED.replace("FOLDER", str(copy_folder)).replace("BLOCK_SERVED", "128")
    text = text.replace("mlacheck.serving_started()\n", "").replace("import os, sys\n", "mlacheck.serving_started()\n")
    result = run(tmp_path, by_path(text, "past the finder", copy_folder, "shipped_triton"))
    assert_not_pass(result)
    [reason] = [line for line in result.report["incomplete"] if "shipped_triton" in line]
    assert "was loaded past mlacheck's import hook" in reason and "until then was not seen" in reason, reason
