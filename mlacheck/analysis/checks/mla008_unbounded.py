"""MLA008 unbounded-specialization: a key field that took more than the rule's `unbounded_after` values on the serving
path that no warm-up variant had (`codes.py` has its page): one finding per field and process, standing for the
serving-path compiles that differ from their nearest precompiled variant in such fields only (`FamilyView.unbounded`:
those get no MLA001 of their own)."""

from __future__ import annotations

from mlacheck import codes
from mlacheck.analysis.findings import Finding
from mlacheck.analysis.view import FamilyView
from mlacheck.keys import value_text

SHOWN = 6  # values a finding lists


def check(view: FamilyView) -> list[Finding]:
    findings = []
    for table in view.tables:
        unbounded = view.unbounded(table)
        for name, values in unbounded.fields.items():
            stalls = [
                v.serving_path_compile_s
                for vid, v in unbounded.serving
                if vid in unbounded.folded and v.serving_path_compile_s
            ]
            first = next(v for _, v in unbounded.serving if value_text(v.key.get(name)) == values[0])
            warm = list(dict.fromkeys(value_text(v.key.get(name)) for v in unbounded.precompiled))
            shown = ", ".join(values[:SHOWN]) + (f", ... ({len(values) - SHOWN} more)" if len(values) > SHOWN else "")
            drivers = view.drivers([name])
            spent = f", {sum(stalls):.1f} s" if stalls else ""
            findings.append(
                Finding(
                    "MLA008",
                    view.name,
                    {},
                    f"{name} took {len(values)} values on the serving path that no warm-up variant had ({shown}): each "
                    f"compiled the kernel again"
                    + (f"{spent} of serving-path compile in all" if stalls else "")
                    + "; the warm-up compiled "
                    + (f"{name} = {', '.join(warm)}" if warm else "nothing of it")
                    + (f"; {name} follows {', '.join(drivers[name])}" if drivers else ""),
                    codes.lookup("MLA008").hint,
                    diff={name: [warm, values]},
                    drivers=drivers,
                    site=first.serving_path_site,
                    stack=first.serving_path_stack,
                    proc=table.proc,
                    summary=f"({name}): {len(values)} values compiled on the serving path{spent}",
                )
            )
    return findings
