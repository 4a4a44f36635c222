"""`Nearest` (the indexed nearest match MLA001, MLA007 and MLA008 use at engine scale) gives what comparing with every
candidate gives: the same candidate, first on a tie, and the same diff, whatever the keys' values and layouts."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from mlacheck.analysis.nearest import LEFT_OUT, Nearest, nearest

FIELDS = ["dtype", "causal", "block", "shape", "split"]
VALUES = st.one_of(
    st.sampled_from(["fp8", "bf16", None]),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([1.0, 0.0, -0.0, math.nan]),
    st.lists(st.integers(0, 2), max_size=2),
)
KEYS = st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=len(FIELDS))


@settings(max_examples=300, deadline=None)
@given(candidates=st.lists(KEYS, max_size=12), keys=st.lists(KEYS, min_size=1, max_size=6))
def test_the_index_finds_what_comparing_with_every_candidate_finds(candidates, keys):
    index = Nearest(candidates[: len(candidates) // 2])
    for candidate in candidates[len(candidates) // 2 :]:
        index.add(candidate)  # added after its indexes were made, too
        for key in keys:
            found = index.of(key)
            expected = nearest(key, index.candidates)
            assert found[0] is expected[0]
            assert repr(found[1]) == repr(expected[1])  # NaN != NaN: compared as text


def test_a_key_far_from_every_candidate_and_one_of_many_fields_are_found_too():
    many = {f"f{i}": i for i in range(20)}  # too many fields to index two left out
    candidates = [{**many, "f0": -1, "f1": -1}, {**many, "f0": -2, "f1": -2, "f2": -2}, {**many, "f3": 7}]
    assert Nearest(candidates).of(many) == (candidates[2], {"f3": [7, 3]})
    far = {name: "x" for name in FIELDS}
    near = [
        {name: 0 for name in FIELDS},
        {**{name: 0 for name in FIELDS}, **dict.fromkeys(FIELDS[: LEFT_OUT + 1], "x")},
    ]
    assert Nearest(near).of(far)[0] is near[1]
    assert Nearest([]).of(far) == (None, {})
