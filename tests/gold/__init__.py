"""The gold reports (README.md beside this file says how each was made)."""

from __future__ import annotations

import json
from pathlib import Path

GOLD = Path(__file__).resolve().parent
NAMES = ("scenario", "vllm", "sglang", "ranks", "incomplete", "hostile")


def gold(name: str) -> dict:
    """A fresh copy of a gold report."""
    return json.loads((GOLD / f"{name}.json").read_text(encoding="utf-8"))
