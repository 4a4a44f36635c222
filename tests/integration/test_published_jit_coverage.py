"""Every JIT compiler the engines as published use is watched or named (issue 28): the published wheels of sglang
0.5.23, vllm 0.34.0, tokenspeed 0.1.1 and tokenspeed-kernel 0.1.4 (marker `network`; kept in a cache folder so a
rerun downloads nothing) are scanned for the imports and calls of every `[[jit_library]]` in the bundled rules; a
library used there must be watched by the loaded rules (`mlacheck.rulefiles.coverage`) or name why it is not."""

from __future__ import annotations

import ast
import warnings
import zipfile
from dataclasses import dataclass, field

import pytest

from mlacheck.rulefiles import load_rules
from mlacheck.rulefiles.coverage import coverage
from tests.integration.published import cached_wheel

pytestmark = pytest.mark.network

ENGINES = ("sglang==0.5.23", "vllm==0.34.0", "tokenspeed==0.1.1", "tokenspeed-kernel==0.1.4")
# read in the engines (jit-libraries research, 2026-12): the scan must find at least these, or it is not scanning
KNOWN_USED = {
    "Triton",
    "CuTe DSL",
    "DeepGEMM",
    "FlashInfer",
    "SGLang JIT modules",
    "TileLang",
    "PyTorch C++/CUDA extensions",
}


@dataclass
class Uses:
    """Where each module was imported and each dotted call made (first file), over every scanned source."""

    imports: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)


def scan(source: str, module: str, uses: Uses, where: str) -> None:
    """The modules `source` (module `module`) imports, and its calls with their names resolved through its imports."""
    try:
        with warnings.catch_warnings():  # the engines' own invalid escapes are not this test's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError:
        return
    package = module.rpartition(".")[0] if not where.endswith("__init__.py") else module
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                uses.imports.setdefault(name.name, where)
                aliases[(name.asname or name.name).split(".")[0] if not name.asname else name.asname] = (
                    name.name if name.asname else name.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            uses.imports.setdefault(base, where)
            for name in node.names:
                uses.imports.setdefault(f"{base}.{name.name}", where)
                aliases[name.asname or name.name] = f"{base}.{name.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            if dotted:
                head, _, rest = dotted.partition(".")
                resolved = aliases.get(head, head) + (f".{rest}" if rest else "")
                uses.calls.setdefault(resolved, where)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.fixture(scope="module")
def uses() -> dict[str, Uses]:
    found = {}
    for requirement in ENGINES:
        uses = found[requirement] = Uses()
        with zipfile.ZipFile(cached_wheel(requirement)) as archive:
            for member in archive.namelist():
                if member.endswith(".py") and ".dist-info/" not in member:
                    module = member[: -len(".py")].replace("/", ".").removesuffix(".__init__")
                    scan(archive.read(member).decode("utf-8", "replace"), module, uses, member)
    return found


def used_by(library, uses: Uses) -> str | None:
    """The first file that uses the library (one of its modules imported, or one of its calls made), or None."""
    for name, where in uses.imports.items():
        if any(_within(name, module) for module in library.modules):
            return where
    for name, where in uses.calls.items():
        if name in library.calls:
            return where
    return None


def test_every_jit_library_the_engines_use_is_watched_or_named(uses):
    rules = load_rules()
    assert rules.jit_libraries, "the bundled rules name no JIT library"
    used, unnamed, stale = set(), [], []
    for library in rules.jit_libraries:
        places = {engine: used_by(library, engine_uses) for engine, engine_uses in uses.items()}
        places = {engine: where for engine, where in places.items() if where}
        watched, missing = coverage(rules, library)
        if places:
            used.add(library.name)
            print(
                f"{library.name}: used by {', '.join(f'{e} ({w})' for e, w in places.items())}; "
                + (f"watched by {'; '.join(watched)}" if not missing else f"NOT watched: {library.not_watched}")
            )
        if places and missing and not library.not_watched:
            unnamed.append(f"{library.name} (used by {', '.join(places)}): nothing watches {', '.join(missing)}")
        if library.not_watched and not missing:
            stale.append(f"{library.name} is named as not watched, but {'; '.join(watched)} watches it")
    assert not unnamed, "JIT libraries neither watched nor named:\n" + "\n".join(unnamed)
    assert not stale, "\n".join(stale)
    assert KNOWN_USED <= used, f"the scan missed libraries the engines are known to use: {KNOWN_USED - used}"


def test_the_scan_resolves_calls_through_imports():
    uses = Uses()
    scan(
        "from torch.utils.cpp_extension import load as build\nimport tvm_ffi.cpp\nfrom .utils import load_jit\n"
        "build('x', ['a.cu'])\ntvm_ffi.cpp.load_inline('y')\nload_jit('z')\n",
        "sglang.kernels.jit.ops.norm",
        uses,
        "sglang/kernels/jit/ops/norm.py",
    )
    assert {
        "torch.utils.cpp_extension.load",
        "tvm_ffi.cpp.load_inline",
        "sglang.kernels.jit.ops.utils.load_jit",
    } <= set(uses.calls)
    assert "sglang.kernels.jit.ops.utils" in uses.imports
