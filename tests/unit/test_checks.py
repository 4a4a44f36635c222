"""The check registry (issue 30): one module per finding code, each registered once, and a check that is not
registered never runs."""

from pathlib import Path

from mlacheck.analysis import analyse, checks, merging, tables, view
from mlacheck.analysis.checks import CHECKS, run_checks
from mlacheck.codes import CODES
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES

CHECKS_DIR = Path(checks.__file__).parent


def test_every_finding_code_is_one_module_and_one_registry_line():
    modules = sorted(path.stem for path in CHECKS_DIR.glob("mla*.py"))
    assert [module[:6].upper() for module in modules] == sorted(CODES)
    assert sorted(check.code for check in CHECKS) == sorted(CODES)
    for check in CHECKS:
        for function in (check.family, check.run):
            if function is not None:
                assert function.__module__.rpartition(".")[2].startswith(check.code.lower())


def test_the_stale_rule_check_runs_first_so_it_can_stop_the_others():
    assert CHECKS[0].code == "MLA004"


def events(*variants: tuple[str, bool, str]) -> list[dict]:
    """One process of the synthetic family: each (dtype, causal, phase) compiled once, in that phase, then dispatched."""
    out = [{"type": "run", "format_version": 3, "pid": 1}, {"type": "family", "family": "synthetic", "version": "9"}]
    for vid, (dtype, causal, phase) in enumerate(variants):
        key = {"dtype": dtype, "causal": causal}
        out.append({"type": "compile", "family": "synthetic", "vid": vid, "key": key, "phase": phase, "seconds": 1.0})
        out.append({"type": "dispatch", "family": "synthetic", "vid": vid, "key": key, "phase": "serving"})
    dispatches = {f"{vid}:serving": 1 for vid in range(len(variants))}
    out.append(
        {"type": "counts", "family": "synthetic", "dispatches": dispatches, "calls": {"dispatch": len(variants)}}
    )
    return [*out, {"type": "exit"}]


def test_a_serving_path_compile_is_found_by_its_registered_check_only():
    rules = load_rules(FIXTURES / "synthetic.toml")
    served = events(("fp8", True, "warmup"), ("bf16", True, "serving"))
    assert [f.code for f in analyse(served, rules).findings] == ["MLA001"]
    without = tuple(check for check in CHECKS if check.code != "MLA001")
    table_set, facts = tables.build_tables(served)
    [table] = table_set.values()
    family = view.FamilyView(rules.families[0], [table], merging.merge([table]), [{}])
    judged = run_checks([family], view.RunView(facts, []), without)
    assert judged.findings == []
