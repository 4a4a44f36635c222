"""`merge` of a family one process alone recorded gives its own variants where no two are alike: they must say what
merging them variant by variant (`merged`) says, over tables made by `tables`' own functions (every field a variant
can hold) and over random programs whose traces lose records (the analysis property's); two alike are merged, not
given as they are."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlacheck.analysis.figures import worst
from mlacheck.analysis.merging import merge, merged
from mlacheck.analysis.tables import ProcessFamily, Variant, build_tables, precompiled, serving_path_compile
from mlacheck.report.model import reported
from tests.unit.test_analysis_property import runs

SECONDS = st.one_of(st.none(), st.floats(-1.0, 5.0), st.integers(0, 3))
TEXT = st.one_of(st.none(), st.sampled_from(["a.py:1", "b.py:2"]))


def said(variants: list[Variant]) -> list[tuple]:
    """What the report and the checks read of merged variants (all but `first_phases`, which only the reading of the
    traces reads)."""
    return [(reported(v), v.procs, v.at_least, v.serving_path_compile, v.serving_path_stack, v.serving_path_origin,
             v.unfinished, v.unverified) for v in variants]  # fmt: skip


@st.composite
def variants(draw, key: dict) -> Variant:
    """A variant as one process's table holds it, each field set by what sets it there."""
    variant = Variant(key, draw(st.one_of(st.none(), st.just({"positional": ["x"], "keywords": []}))))
    if draw(st.booleans()):
        precompiled(variant, draw(st.sampled_from(["warmup", "capture", "borrowed"])), draw(SECONDS), draw(TEXT))
    for _ in range(draw(st.integers(0, 2))):
        serving_path_compile(variant, draw(SECONDS), draw(TEXT), ["f"], draw(st.sampled_from(["compile", "wait"])))
        if draw(st.booleans()):
            variant.unfinished = variant.unfinished or "the process died in it"
    variant.dispatches, variant.warmup_dispatches = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    variant.captured, variant.at_least = draw(st.booleans()), draw(st.booleans())
    if draw(st.booleans()):
        variant.first_dispatch_site, variant.first_call = draw(TEXT), {"m": 1}
    for _ in range(draw(st.integers(0, 2))):
        variant.numerics = worst(variant.numerics, {"max_abs_error": draw(st.floats(0, 1))})
    variant.unverified = variant.precompiled and not variant.dispatches and draw(st.booleans())
    variant.first_phases = ("warmup",)
    variant.procs = [7]
    return variant


@st.composite
def tables(draw) -> ProcessFamily:
    table = ProcessFamily(7, "synthetic")
    keys = draw(st.lists(st.sampled_from(["fp8", "bf16", "1", 1, True, "True"]), max_size=5))
    for vid, value in enumerate(keys):
        table.variants[vid] = draw(variants({"dtype": value}))
    return table


@settings(max_examples=300, deadline=None)
@given(tables())
def test_one_process_s_variants_say_what_merging_them_says(table):
    assert said(merge([table])) == said(merged([table]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_so_do_the_tables_of_random_programs_traces(run):
    found, _ = build_tables(run[0])
    for table in found.values():
        assert said(merge([table])) == said(merged([table]))


def test_two_variants_alike_in_one_process_are_merged_not_given_as_they_are():
    table = ProcessFamily(0, "synthetic")
    table.variants[0] = Variant({"dtype": "1"})
    table.variants[1] = Variant({"dtype": 1})  # (the same key text: one variant in the report)
    table.variants[1].dispatches = 3
    precompiled(table.variants[0], "warmup", 0.5, "warm.py:1")
    [variant] = merge([table])
    assert variant not in table.variants.values()
    assert (variant.precompiled, variant.dispatches, variant.procs) == (True, 3, [0, 0])
