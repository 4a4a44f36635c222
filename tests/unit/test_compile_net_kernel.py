"""Compile nets name a build by the rule's `kernel` path (`self.name`, an argument's attribute), keep the builder's
frames out of the site (`site_skip`), and a net beneath another leaves the build to the outer one (one build, one
stall)."""

import sys
import types

from mlacheck.capture.compile_net import CompileNetCapture
from mlacheck.rulefiles.schema import CompileNet
from mlacheck.sinks import MemorySink


def builder_module() -> types.ModuleType:
    """A builder (FlashInfer's JitSpec shape) whose build runs a DSL compile (cute.compile's shape) inside it."""
    module = types.ModuleType("synthetic_builder")
    exec(
        "class Spec:\n"
        "    def __init__(self, name, flags):\n"
        "        self.name, self.flags = name, flags\n"
        "    def build(self, verbose=False):\n"
        "        return compile_kernel(len, self.flags)\n"
        "def compile_kernel(function, flags):\n"
        "    return function\n",
        module.__dict__,
    )
    sys.modules[module.__name__] = module
    return module


def test_a_build_is_named_by_the_kernel_path_and_a_net_beneath_it_records_nothing():
    module, sink = builder_module(), MemorySink()
    outer = CompileNetCapture(
        CompileNet(function="synthetic_builder:Spec.build", label="builder", kernel="self.name",
                   site_skip=["synthetic_builder"]),
        sink,
    )  # fmt: skip
    inner = CompileNetCapture(CompileNet(function="synthetic_builder:compile_kernel", label="dsl"), sink)
    outer.install(module)
    inner.install(module)
    try:
        module.Spec("norm_fp16", 3).build()
        module.compile_kernel(module.Spec, 4)  # a compile of its own, outside any build
    finally:
        inner.remove()
        outer.remove()
        del sys.modules[module.__name__]
    compiles = [e for e in sink.events if e["type"] == "unwatched_compile"]
    assert [(e["net"], e["kernel"]) for e in compiles] == [("builder", "norm_fp16"), ("dsl", "synthetic_builder.Spec")]
    assert compiles[0]["key"] == {"name": "norm_fp16", "flags": 3}  # the spec's configuration
    assert compiles[0]["site"].startswith("tests/unit/test_compile_net_kernel.py:")  # not the builder's own frame


def test_a_text_argument_is_keyed_by_its_digest():
    module, sink = builder_module(), MemorySink()
    net = CompileNetCapture(CompileNet(function="synthetic_builder:compile_kernel", label="dsl"), sink)
    net.install(module)
    try:
        module.compile_kernel(len, "x" * 5000)  # a generated build file
    finally:
        net.remove()
        del sys.modules[module.__name__]
    [compiled] = [e for e in sink.events if e["type"] == "unwatched_compile"]
    assert compiled["key"]["arg1"].startswith("5000 characters, sha256 ")
