"""The terminal report of the gold reports (no torch): counts that add up, an incomplete reason said once, the
compile policy of a merged report as it was, the fix once per code."""

from __future__ import annotations

import io
import re

from rich.console import Console

from mlacheck.report.terminal import render
from tests.gold import NAMES, gold


def shown(report: dict, width: int = 100, detail: str = "normal") -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=width, color_system=None), detail)
    return out.getvalue()


def test_a_familys_dispatch_calls_add_up_and_serving_is_the_dispatches_column():
    for name in NAMES:
        report = gold(name)
        lines = shown(report, 300).splitlines()
        for family in report["families"]:
            if not family.get("dispatch_calls") or family.get("discovered"):
                continue
            [title] = [line for line in lines if line.startswith(f"{family['name']}  (") and "dispatch call" in line]
            total, said = re.search(r"(\d+) dispatch call\(s\): (.*)$", title).groups()
            parts = [int(count) for count in re.findall(r"(\d+) (?:serving|in |died|without)", said)]
            assert int(total) == family["dispatch_calls"] and sum(parts) == int(total), (name, title)
            serving = re.search(r"(\d+) serving", said)
            assert int(serving[1] if serving else 0) == sum(v["dispatches"] for v in family["variants"]), title


def test_an_incomplete_reason_is_said_once():
    report = gold("incomplete")
    [reason] = report["incomplete"]
    text = " ".join(shown(report).split())
    assert text.count(reason) == 1 and "exit 2: incomplete (the reason above)" in text


def test_a_merged_report_whose_runs_compiled_does_not_say_skip():
    report = gold("scenario")
    report["compile_policy"] = "skip"  # the first run's policy; the variants hold the others' compile seconds
    text = shown(report)
    assert "skip (keys only, nothing compiled)" not in text and "skip in some runs, real in others" in text


def test_the_fix_is_said_once_per_code():
    text = shown(gold("scenario"), 80)
    assert text.count("fix MLA001:") == 1 and text.count("fix MLA002:") == 1 and "fix: " not in text


def test_every_header_name_stands_apart_from_its_value():
    report = gold("scenario")
    report["scenario"]["header"] = [*report["scenario"]["header"], ["library warnings", "2 from the libraries"]]
    for width in (80, 120):
        lines = shown(report, width).splitlines()
        [row] = [line for line in lines if "library warnings" in line]
        assert re.search(r"library warnings\s+2 from", row), row
