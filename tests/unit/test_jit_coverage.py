"""`mlacheck.rulefiles.coverage`: a JIT library is watched only where every path its compiles go through is."""

from mlacheck.rulefiles import RuleSet
from mlacheck.rulefiles.coverage import coverage
from mlacheck.rulefiles.schema import CompileNet, JitLibrary, RuleFile


def rules(*nets: str) -> RuleSet:
    return RuleSet([RuleFile(compile_net=[CompileNet(function=net, label="net") for net in nets])])


def test_a_library_with_one_of_two_build_paths_netted_is_not_watched():
    library = JitLibrary(name="lib", modules=["lib"], compiles_through=["lib.nvcc", "lib.dsl"])
    watched, missing = coverage(rules("lib.nvcc.core:Spec.build"), library)
    assert missing == ["lib.dsl"] and watched
    assert coverage(rules("lib.nvcc.core:Spec.build", "lib.dsl:build"), library)[1] == []


def test_a_net_in_a_sibling_package_with_a_common_prefix_does_not_count():
    library = JitLibrary(name="lib", modules=["flashinfer.jit"])
    assert coverage(rules("flashinfer.jitter:build"), library) == ([], ["flashinfer.jit"])
    assert coverage(rules("flashinfer.jit.core:build"), library)[1] == []


def test_a_library_named_by_its_calls_is_watched_through_its_compile_path_only():
    library = JitLibrary(
        name="ext", calls=["torch.utils.cpp_extension.load"], compiles_through=["torch.utils.cpp_extension"]
    )
    assert coverage(rules("torch.fx:compile"), library)[1] == ["torch.utils.cpp_extension"]
