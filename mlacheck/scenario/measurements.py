"""What the scenario measures per variant in the GPU modes, and how the report shows it.

Each call the traffic makes on a CUDA device is measured against mlacheck's FP32 reference: the query tokens it
carried, the FP8 accuracy cost (the reference on the FP8 inputs against the original bf16 ones) and, in execute
mode, the launched kernel against the reference. The kernel's figures are a `numerics` event, which analysis
judges against the family's `[numerics]` (MLA005); the rest belongs to the scenario and goes to its part of the
report as extra columns of the variant tables.
"""

from __future__ import annotations

from mlacheck.analysis.figures import worst
from mlacheck.events import numerics_event
from mlacheck.keys import key_identity
from mlacheck.sinks import EventSink

COLUMNS = ["tokens", "FP8 cost"]


class Measurements:
    """Per (family, key): the tokens measured and the worst FP8 cost."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self._variants: dict[tuple, dict] = {}

    def record(self, family: str, key: dict | None, tokens: int, fp8_cost: dict, kernel: dict | None) -> None:
        if key is None:
            return
        if kernel is not None:
            self.sink.write(numerics_event(family, key, kernel))
        entry = self._variants.setdefault((family, key_identity(key)), {"key": key, "tokens": 0, "fp8_cost": None})
        entry["tokens"] += tokens
        entry["fp8_cost"] = worst(entry["fp8_cost"], fp8_cost)

    def of(self, family: str) -> list[dict]:
        """What was measured of each of a family's variants: {"key", "tokens", "fp8_cost"}."""
        return [entry for (name, _), entry in self._variants.items() if name == family]

    def columns(self) -> dict[str, dict]:
        """{family: {"columns": [...], "variants": [{"key", "tokens", "fp8_cost", "cells"}]}}: what was measured, and
        the scenario's extra columns of the variant tables (`cells`, in the order of `columns`)."""
        out: dict[str, dict] = {}
        for (family, _), entry in self._variants.items():
            cells = [str(entry["tokens"]), metrics_text(entry["fp8_cost"])]
            out.setdefault(family, {"columns": COLUMNS, "variants": []})["variants"].append({**entry, "cells": cells})
        return out


def metrics_text(metrics: dict | None) -> str:
    """ "cos 0.99870, rel 1.20e-02, LSE 3.1e-03": an accuracy measurement in a table cell."""
    if metrics is None:
        return "—"
    lse = metrics.get("lse_max_abs_err")
    return f"cos {metrics['cosine_similarity']:.5f}, rel {metrics['max_rel_err']:.2e}" + (
        f", LSE {lse:.2e}" if lse is not None else ""
    )
