"""The compiles that returned and await their record (`awaited.Awaited`) are found at once, not by a walk over every
compile in flight (a hostile trace of 10^5 of them took hours): over random interleavings of compile brackets and
records of several processes, families, nets and variants, the reader's compiles in flight are, after every event and
in order, those the walk (the long way, written out below as the reader had it) leaves."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mlacheck.analysis.tables import TablesReader


def walked(starts: dict, proc, event: dict) -> None:
    """The long way: the first returned compile of the same family or net in the process whose start knew the same
    variant, else the first of them, is closed."""
    owner, name = ("family", event["family"]) if event["type"] == "compile" else ("net", event.get("net"))
    first = None
    for key, (_, start, end) in starts.items():
        if key[0] == proc and end and start.get(owner) == name:
            if "vid" in start and start["vid"] == event.get("vid"):
                first = key
                break
            first = key if first is None else first
    if first is not None:
        del starts[first]


def bracketed(starts: dict, index: int, proc, event: dict) -> None:
    """The long way's brackets: a start held, an end that returned moved last, awaiting its record."""
    if event["type"] == "compile_start":
        starts[(proc, event["id"])] = (index, event, None)
        return
    begun = starts.pop((proc, event["id"]), None)
    if begun is not None and event.get("outcome", "returned") == "returned":
        starts[(proc, event["id"])] = (begun[0], begun[1], event)


NAMES = st.sampled_from(["a", "b"])
VIDS = st.one_of(st.none(), st.integers(0, 2))


@st.composite
def event(draw) -> dict:
    kind = draw(
        st.sampled_from(
            ["compile_start", "compile_start", "compile_end", "compile_end", "compile", "unwatched_compile"]
        )
    )
    made = {"type": kind, "proc": draw(st.sampled_from([0, 0, 0, 1]))}
    if kind == "compile_start":
        made.update(id=draw(st.integers(0, 3)), phase="warmup", t=1.0)
        for name in ("family", "net"):
            if draw(st.integers(0, 3)):
                made[name] = draw(NAMES)
        if draw(st.booleans()):
            made["vid"] = draw(VIDS)
    elif kind == "compile_end":
        made.update(
            id=draw(st.integers(0, 3)), outcome=draw(st.sampled_from(["returned", "returned", "raised"])), t=1.0
        )
    elif kind == "compile":
        made.update(family=draw(NAMES), vid=draw(st.integers(0, 2)), key={"k": 1}, phase="warmup", origin="compile")
    else:
        made.update(net=draw(NAMES), kernel="k", phase="warmup")
        if draw(st.booleans()):
            made["vid"] = draw(st.one_of(VIDS, st.just([1])))
    return made


def returned(id: int, family: str, **start) -> list[dict]:
    return [
        {"type": "compile_start", "proc": 0, "id": id, "phase": "warmup", "t": 1.0, "family": family, **start},
        {"type": "compile_end", "proc": 0, "id": id, "outcome": "returned", "t": 1.0},
    ]


RECORD = {
    "type": "compile",
    "proc": 0,
    "family": "a",
    "vid": 2,
    "key": {"k": 1},
    "phase": "warmup",
    "origin": "compile",
}


@settings(max_examples=1000, deadline=None)
@given(st.lists(event(), min_size=8, max_size=60))
@example([*returned(0, "a"), *returned(1, "a"), RECORD])  # the first of the family
@example([*returned(0, "a"), *returned(1, "a", vid=2), *returned(2, "a", vid=2), RECORD])  # the first of the variant
def test_the_compile_a_record_closes_is_the_one_the_walk_closes(events):
    reader, starts = TablesReader({}), {}
    for index, made in enumerate(events):
        reader.read(index, made)
        if made["type"] in ("compile_start", "compile_end"):
            bracketed(starts, index, made["proc"], made)
        else:
            walked(starts, made["proc"], made)
        assert list(reader.brackets.starts.items()) == list(starts.items())
