"""The terminal report of the gold reports (no torch): counts that add up, an incomplete reason said once, the
compile policy of a merged report as it was, the fix once per code."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console
from rich.text import Text

from mlacheck.report.layout import wrap
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


FIGURE_SPLIT = re.compile(r"\d$")  # a line that ends in a figure ...
UNIT_FIRST = re.compile(r"^\s*(?:s|ms|[KMG]i?B|%)(?![\w])")  # ... and a next line that begins with its unit


def split_figures(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    return [(a, b) for a, b in zip(lines, lines[1:]) if FIGURE_SPLIT.search(a.rstrip()) and UNIT_FIRST.match(b)]


def test_a_figure_stays_with_its_unit_where_a_line_wraps():
    """The gold report, its prefill family named 8 characters longer: at 80 columns its findings' lines wrap right
    between "10.0" and "s wasted" (and "8.8" and "s stall") where a space between a figure and its unit may break."""
    report = json.loads(
        json.dumps(gold("scenario")).replace("tokenspeed_mla.prefill", "tokenspeed_mla.prefill_variant")
    )
    for width in (80, 100, 120):
        for detail in ("normal", "verbose"):
            text = shown(report, width, detail)
            assert not split_figures(text), (width, detail, split_figures(text))
    assert "): 8.8 s\n" in shown(report, 80) and "\n       10.0 s wasted at" in shown(report, 80)


def test_wrap_keeps_a_figure_and_its_unit_as_one_word():
    for tail in ("(0.1 s wasted)", "0.4 s stall", "2 GiB free", "≥1.0 s serving-path compile"):
        lines = wrap(Text("x" * 74 + " " + tail), 80, 0, 7)
        assert not split_figures("\n".join(line.plain for line in lines)), lines
    assert [line.plain for line in wrap(Text("a 0.1 seconds"), 8)] == ["a 0.1", "seconds"]  # a word, not a unit


def test_an_unwatched_compiles_finding_names_its_kernel_once():
    """MLA007's family is "unwatched:KERNEL" and its summary begins "KERNEL: ": the line says the kernel once."""
    report = gold("scenario")
    kernel = "flash_attn.cute.cu_blocks_kernel.CuBlocksToBatchKernel"
    report["findings"].append(
        {
            **report["findings"][0],
            "code": "MLA007",
            "family": f"unwatched:{kernel}",
            "key": {"arg1": 3},
            "diff": {},
            "summary": f"{kernel}: 0.4 s serving-path compile, no rule file watches it",
        }
    )
    for width, detail in ((80, "normal"), (120, "normal"), (120, "verbose")):
        text = " ".join(shown(report, width, detail).split())
        assert f"MLA007 unwatched:{kernel} 0.4 s serving-path compile, no rule file watches it" in text, text
        assert text.count(kernel) == 1, text


def test_a_program_run_that_no_trace_was_read_of_says_so():
    report = gold("ranks")
    report["processes"] = []
    [row] = [line for line in shown(report, 80).splitlines() if line.startswith("│ processes")]
    assert "none observed (no trace was read)" in row and "wrote" not in row
