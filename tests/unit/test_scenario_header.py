"""The scenario's rows of the report header (`scenario.header`): the gold reports' rows are what `header_rows` writes
from their facts, and the decode traffic row reads well whichever way the serving batches ran."""

from __future__ import annotations

import pytest

from mlacheck.scenario.header import header_rows
from tests.gold import gold


@pytest.mark.parametrize("name", ["scenario", "vllm", "sglang"])
def test_a_gold_reports_header_is_what_header_rows_writes_from_its_facts(name):
    report = gold(name)
    assert header_rows(report["scenario"], report["mode"]) == report["scenario"]["header"]


def decode_traffic(**facts) -> str:
    scenario = {"decode_dispatches": 115, "batch_sizes": [1, 3, 6], "capture_sizes": [1, 2, 4, 8], **facts}
    return dict((row[0], row[1]) for row in header_rows(scenario, "dry"))["decode traffic"]


def test_decode_traffic_with_nothing_eager_says_none_eager():
    assert decode_traffic(replays=3, eager_batch_sizes=[]) == (
        "batch sizes 1, 3, 6: 3 replayed a graph, none eager; 115 decode dispatches in all"
    )


def test_decode_traffic_says_where_it_ran_eager_and_all_eager_without_a_replay():
    assert "3 replayed a graph, eager at 1, 3, 6;" in decode_traffic(replays=3, eager_batch_sizes=[1, 3, 6])
    assert "2 replayed a graph, eager at 6;" in decode_traffic(replays=2, eager_batch_sizes=[6])
    assert decode_traffic(replays=0, eager_batch_sizes=[1, 3, 6]) == (
        "batch sizes 1, 3, 6: all eager; 115 decode dispatches in all"
    )
