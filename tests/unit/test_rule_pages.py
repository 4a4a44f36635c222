"""`mlacheck rule CODE`: every code's page, from its one entry in codes.py, as ruff's rule pages are written."""

from __future__ import annotations

import re

import pytest

from mlacheck.codes import CODES, find
from mlacheck.commands.rule_page import page, pages
from mlacheck.errors import MlacheckError

SECTIONS = ["## What it finds", "## Why it matters", "## Example", "## How to fix it", "## How to silence it"]


@pytest.mark.parametrize("code", list(CODES))
def test_every_code_has_a_whole_page(code):
    entry = CODES[code]
    text = page(entry)
    assert text.startswith(f"# {entry.name} ({code})\n\nSeverity: {entry.severity.value}\n")
    positions = [text.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    assert entry.summary in text and entry.why in text and entry.fix in text and entry.example in text
    assert entry.example.count("```") >= 2 and f"\n{code} " in entry.example  # a snippet and the finding it gives
    assert f"--ignore {code}" in text and "--baseline" in text and "[tool.mlacheck]" in text
    assert text.count("```") % 2 == 0


@pytest.mark.parametrize("code", list(CODES))
def test_an_examples_finding_names_its_kernel_once(code):
    """The finding an example gives reads as the terminal prints it: "CODE FAMILY what it costs", the kernel that an
    "unwatched:KERNEL" (or "triton:KERNEL") family names not said again after it."""
    [line] = [line for line in CODES[code].example.splitlines() if line.startswith(f"{code} ")]
    family = line.split()[1]
    kernel, rest = family.partition(":")[2], line[len(f"{code} {family}") :]
    assert not family.endswith(":") and not (kernel and kernel in rest), line


def test_a_code_is_found_by_its_code_or_its_name():
    assert find("mla002") is CODES["MLA002"] and find("dead-warmup") is CODES["MLA002"] and find("MLA9") is None
    assert pages("serving-path-compile", False) == pages("MLA001", False)


def test_all_pages_in_code_order():
    text = pages(None, True)
    assert re.findall(r"^# .* \((MLA\d{3})\)$", text, re.MULTILINE) == list(CODES)


@pytest.mark.parametrize("name, every", [(None, False), ("MLA001", True), ("MLA999", False)])
def test_a_wrong_request_is_one_line(name, every):
    with pytest.raises(MlacheckError) as caught:
        pages(name, every)
    assert "\n" not in str(caught.value)
