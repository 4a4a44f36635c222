"""CI output formats and the baseline over real reports (gold files, tests/gold/) and a hand-made one.

The real report is the SGLang bf16 warm-up: 3 MLA001, 3 MLA003 (errors), 3 MLA002 (warnings) over 6 variants.
The SARIF schema is the OASIS 2.1.0 one, vendored (tests/fixtures/sarif-schema-2.1.0.README says from where).
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from mlacheck.codes import CODES
from mlacheck.errors import MlacheckError
from mlacheck.report import common
from mlacheck.report.baseline import baseline_fingerprints, fingerprint, load_baseline, report_fingerprints
from mlacheck.report.common import Repository
from mlacheck.report.formats import output_specs, parse_output, write_outputs
from mlacheck.report.github import escape_property, publish, to_github
from mlacheck.report.junit import to_junit
from mlacheck.report.markdown import to_markdown
from mlacheck.report.model import decide, read_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.report.sarif import to_sarif
from tests.gold import gold

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
FAMILY = "tokenspeed_mla.prefill"


@pytest.fixture
def real_reports():
    """Two independent CLI runs of the same scenario (real compiles): their JSON reports, checked in."""
    return [gold("scenario"), gold("scenario_again")]


@pytest.fixture
def real(real_reports):
    return copy.deepcopy(real_reports[0])


def hand_made() -> dict:
    """A minimal report of tomorrow's shape: a site, a process, a program, a keyless finding, awkward text."""
    key = {"q_dtype": "float8_e4m3fn", "is_causal": "True"}
    return {
        "format_version": 1,
        "verdict": "fail",
        "mode": "dry",
        "target_arch": "sm_100a",
        "compile_policy": "skip",
        "tokenspeed_mla_version": "2.0.4",
        "mlacheck_version": "0.1.0",
        "device": None,
        "strict": False,
        "scenario": {
            "model": "deepseek-v3",
            "tp": 8,
            "warmup": "engine.py:warm|up",
            "profile": "sglang",
            "header": [["model", "deepseek-v3  tp=8"], ["warm-up", "engine.py:warm|up"]],
        },
        "program": {"command": ["python", "-m", "sglang.launch_server", "--tp", "8"], "exit_code": 0, "signal": None},
        "processes": [{"pid": 4242, "rank": 3, "trace": "/tmp/t.jsonl", "truncated": False}],
        "families": [
            {
                "name": FAMILY,
                "version": "2.0.4",
                "key_fields": ["q_dtype", "is_causal"],
                "variants": [
                    {
                        "key": key,
                        "precompiled": False,
                        "compile_s": None,
                        "dispatches": 2,
                        "compiled_by": None,
                        "serving_path_compile_s": 41.5,
                        "status": "serving-path compile",
                    },
                    {
                        "key": {"q_dtype": "bf|16", "is_causal": "True"},
                        "precompiled": True,
                        "compile_s": 3.9,
                        "dispatches": 0,
                        "compiled_by": "engine/warmup.py:17",
                        "serving_path_compile_s": None,
                        "status": "dead warm-up",
                    },
                ],
            }
        ],
        "findings": [
            {
                "code": "MLA001",
                "name": "serving-path-compile",
                "severity": "error",
                "family": FAMILY,
                "key": key,
                "nearest": {"q_dtype": "bf|16", "is_causal": "True"},
                "diff": {"q_dtype": ["bf|16", "float8_e4m3fn"]},
                "message": "100% of requests stalled\nsecond line",
                "hint": "warm up fp8",
                "site": "engine/backend.py:42",
                "process": {"pid": 4242, "rank": 3},
            },
            {
                "code": "MLA004",
                "name": "stale-rule",
                "severity": "error",
                "family": FAMILY,
                "key": {},
                "nearest": None,
                "diff": {},
                "message": "installed tokenspeed-mla 9.0 lies outside the checked versions",
                "hint": "re-check",
                "site": None,
                "process": None,
            },
            {
                "code": "MLA002",
                "name": "dead-warmup",
                "severity": "warning",
                "family": FAMILY,
                "key": {"q_dtype": "bf|16", "is_causal": "True"},
                "nearest": None,
                "diff": {},
                "message": "precompiled but never dispatched",
                "hint": "drop it",
                "site": "engine/warmup.py:17",
            },
        ],
        "internal_errors": ["capture: a write through an old reference"],
    }


@pytest.fixture
def repository(tmp_path):
    """A repository holding the hand-made report's engine files (code scanning locates findings in it only)."""
    for name in ("engine/backend.py", "engine/warmup.py", "engine/other warmup.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("pass\n")
    return Repository(tmp_path, tmp_path)


def apply_baseline(report: dict, baseline: dict) -> dict:
    """The report decided again with the baseline's findings known, as `mlacheck report --baseline` does."""
    policy = ReportPolicy(strict=report.get("strict", False), known=frozenset(baseline_fingerprints(baseline)))
    decided = decide(read_report(report), policy)
    return decided.model_dump(mode="json")


# fingerprints


def test_fingerprints_are_stable_across_runs_and_distinct_within_one(real_reports):
    first, second = (report_fingerprints(report["findings"]) for report in real_reports)
    assert len(first) == 9
    assert first == second
    assert len(set(first)) == 9
    assert all(len(value) == 32 and int(value, 16) >= 0 for value in first)


def test_fingerprint_ignores_pid_message_site_and_timings_but_not_identity():
    finding = hand_made()["findings"][0]
    base = fingerprint(finding)
    noise = {
        **finding,
        "message": "other",
        "site": "x.py:1",
        "hint": "h",
        "process": {"pid": 1, "rank": 3},
        "key": dict(reversed(list(finding["key"].items()))),
    }
    assert fingerprint(noise) == base
    assert fingerprint({**finding, "process": {"pid": 4242, "rank": 4}}) != base
    assert fingerprint({**finding, "code": "MLA003"}) != base
    assert fingerprint({**finding, "key": {**finding["key"], "is_causal": "False"}}) != base
    assert fingerprint({**finding, "family": "other"}) != base


def test_repeated_identities_get_distinct_fingerprints():
    finding = hand_made()["findings"][0]
    prints = report_fingerprints([finding, {**finding, "message": "another contract"}])
    assert prints[0] == fingerprint(finding)
    assert prints[0] != prints[1]


# junit


def test_junit_real_report_one_testcase_per_variant_failures_per_error(real):
    root = ET.fromstring(to_junit(real))
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "mlacheck"
    cases = suite.findall("testcase")
    assert len(cases) == 6 == int(suite.get("tests")) == int(root.get("tests"))
    assert {case.get("classname") for case in cases} == {FAMILY}
    failures = [failure for case in cases for failure in case.findall("failure")]
    errors = [f for f in real["findings"] if f["severity"] == "error"]
    assert sorted((f.get("type"), f.get("message")) for f in failures) == sorted(
        (f["code"], f["message"]) for f in errors
    )
    assert int(suite.get("failures")) == sum(1 for case in cases if case.find("failure") is not None) == 6
    outs = "\n".join(case.findtext("system-out") or "" for case in cases)
    assert outs.count("MLA002 dead-warmup [warning]") == 3
    names = {case.get("name"): case for case in cases}  # named by the fields that tell the variants apart
    assert "q_dtype=float8_e4m3fn, is_causal=False, return_lse=True" in names and max(map(len, names)) < 60
    assert (
        names["q_dtype=float8_e4m3fn, is_causal=False, return_lse=True"]
        .findtext("system-out")
        .startswith(
            "key: q_dtype=float8_e4m3fn, d_qk=192, d_v=128, is_causal=False, return_lse=True, enable_pdl=True, "
            "enable_ex2_emulation=False"
        )
    )  # the whole key is in its output (before: in its name, about 490 characters for a decode variant)


def test_junit_keyless_finding_is_its_own_testcase_and_counts_add_up():
    root = ET.fromstring(to_junit(hand_made()))
    suite = root.find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert set(cases) == {
        "q_dtype=float8_e4m3fn",
        "q_dtype=bf|16",
        "MLA004 stale-rule",
        "internal error in capture",  # an internal error is an <error>: the run cannot pass
    }
    assert cases["MLA004 stale-rule"].find("failure").get("type") == "MLA004"
    assert (
        cases["q_dtype=float8_e4m3fn"].find("failure").get("message") == "100% of requests stalled\\nsecond line"
    )  # a run's newline is escaped, never a line of its own
    assert cases["q_dtype=bf|16"].find("failure") is None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")
    assert "a write through an old reference" in suite.findtext("system-err")
    assert "a write through an old reference" in cases["internal error in capture"].find("error").get("message")


def test_under_strict_a_new_warning_fails_in_every_ci_format():
    """--strict makes a run with only a dead warm-up FAIL: JUnit, SARIF and GitHub said nothing failed (red-team)."""
    report = hand_made()
    report["findings"] = [f for f in report["findings"] if f["code"] == "MLA002"]
    report["internal_errors"] = []
    for strict in (False, True):
        report["strict"] = strict
        suite = ET.fromstring(to_junit(report)).find("testsuite")
        [result] = to_sarif(report)["runs"][0]["results"]
        [annotation] = to_github(report).splitlines()
        assert suite.get("failures") == ("1" if strict else "0")
        assert result["level"] == ("error" if strict else "warning")
        assert annotation.startswith("::error " if strict else "::warning ")
    report["findings"][0]["baselined"] = True  # a known finding fails nothing, strict or not
    assert ET.fromstring(to_junit(report)).find("testsuite").get("failures") == "0"
    assert to_github(report) == ""


def test_an_incomplete_run_has_an_error_result_in_sarif_for_each_reason():
    """Code scanning turns results into alerts: an INCOMPLETE run with no finding showed none (red-team)."""
    report = hand_made() | {"findings": [], "internal_errors": [], "verdict": "incomplete"}
    report["incomplete"] = ["a Python process ran unobserved: pid 7", "events were lost: t.jsonl:3"]
    log = to_sarif(report)
    _validate(log)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("mlacheck/incomplete", "error")] * 2
    assert [r["message"]["text"] for r in results] == report["incomplete"]
    assert len({r["partialFingerprints"]["mlacheck/v1"] for r in results}) == 2
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_program_mode_report_per_process_findings():
    report = hand_made()
    report.update(mode="program", scenario=None)
    other = {**report["findings"][0], "process": {"pid": 4243, "rank": 4}, "site": None}
    report["findings"].insert(1, other)
    prints = report_fingerprints(report["findings"])
    assert len(set(prints)) == 4
    suite = ET.fromstring(to_junit(report)).find("testsuite")
    [case] = [c for c in suite.findall("testcase") if c.get("name") == "q_dtype=float8_e4m3fn"]
    assert [f.get("type") for f in case.findall("failure")] == ["MLA001", "MLA001"]
    assert "rank 4 (pid 4243)" in case.findall("failure")[1].text
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")  # + the internal error
    assert "| mode | program |" in to_markdown(report)
    _validate(to_sarif(report))
    assert (
        to_github(report).splitlines()[1].startswith("::error title=MLA001 serving-path-compile [rank 4 (pid 4243)]::")
    )


# sarif


def _validate(log: dict) -> None:
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    jsonschema.Draft4Validator(SCHEMA).validate(log)


def test_sarif_validates_against_the_official_schema(real):
    for report in (real, hand_made(), apply_baseline(real, real)):
        _validate(json.loads(json.dumps(to_sarif(report))))


def test_sarif_schema_check_can_fail(real):
    log = to_sarif(real)
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        _validate(log)


def test_sarif_rules_results_and_fingerprints(real_reports):
    logs = [to_sarif(report, repository=Repository(ROOT, ROOT)) for report in real_reports]
    run = logs[0]["runs"][0]
    assert logs[0]["version"] == "2.1.0"
    driver = run["tool"]["driver"]
    assert driver["name"] == "mlacheck" and driver["version"] == real_reports[0]["mlacheck_version"]
    assert [rule["id"] for rule in driver["rules"]] == [*CODES, "mlacheck/incomplete"]
    assert driver["rules"][1]["defaultConfiguration"]["level"] == "warning"
    assert driver["rules"][0]["help"]["text"] == CODES["MLA001"].hint
    results = run["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        (f["code"], f["severity"]) for f in real_reports[0]["findings"]
    ]
    compiled_by = {
        json.dumps(v["key"], sort_keys=True): v["compiled_by"] for v in real_reports[0]["families"][0]["variants"]
    }
    for result, finding in zip(results, real_reports[0]["findings"]):
        site = finding.get("site") or compiled_by[json.dumps(finding["key"], sort_keys=True)]
        if site.startswith("tests/fixtures/sglang_warmup.py:"):  # the user's warm-up: a file of this repository
            path, line = site.rsplit(":", 1)
            assert result["locations"] == [
                {"physicalLocation": {"artifactLocation": {"uri": path}, "region": {"startLine": int(line)}}}
            ]
        else:  # the SGLang line the scenario models: no file of this repository, so no location, and named
            assert "(modelled on SGLang 0.5.13)" in site and result["locations"] == []
            assert f"\nat {site}\n" in result["message"]["text"]
    assert all(driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    prints = [[r["partialFingerprints"]["mlacheck/v1"] for r in log["runs"][0]["results"]] for log in logs]
    assert prints[0] == prints[1] and len(set(prints[0])) == 9


def test_sarif_location_from_site(repository):
    results = to_sarif(hand_made(), repository=repository)["runs"][0]["results"]
    assert results[0]["locations"] == [
        {"physicalLocation": {"artifactLocation": {"uri": "engine/backend.py"}, "region": {"startLine": 42}}}
    ]
    assert results[1]["locations"] == []
    assert results[0]["properties"]["process"] == {"pid": 4242, "rank": 3}


def test_sarif_site_less_findings_fall_back_to_compiled_by_then_anchor(repository):
    report = hand_made()
    report["findings"][2]["site"] = None
    report["families"][0]["variants"][1]["compiled_by"] = "engine/other warmup.py:9"
    results = to_sarif(report, anchor="rules/prefill.toml", repository=repository)["runs"][0]["results"]
    assert results[1]["locations"] == [{"physicalLocation": {"artifactLocation": {"uri": "rules/prefill.toml"}}}]
    assert results[2]["locations"] == [
        {"physicalLocation": {"artifactLocation": {"uri": "engine/other%20warmup.py"}, "region": {"startLine": 9}}}
    ]
    assert all(result["locations"] for result in results)
    _validate(to_sarif(report, anchor="/abs/rules.toml:3"))


@pytest.mark.parametrize(
    "site",
    [
        "sglang/srt/layers/attention/tokenspeed_mla_backend.py:324 TokenspeedMLABackend._run_prefill_kernel "
        "(modelled on SGLang 0.5.13)",
        "tokenspeed_mla/mla_prefill.py:88",  # an installed package
        "/usr/lib/python3/dist-packages/elsewhere.py:3",
        "engine/gone.py:5",  # inside, but no such file
    ],
)
def test_code_scanning_locates_only_files_inside_the_repository(repository, site):
    report = hand_made()
    report["findings"][0]["site"] = site
    [result] = [r for r in to_sarif(report, repository=repository)["runs"][0]["results"] if r["ruleId"] == "MLA001"]
    assert result["locations"] == [] and f"\nat {site}\n" in result["message"]["text"]
    line = to_github(report, repository).splitlines()[0]
    assert line.startswith("::error title=MLA001") and "file=" not in line
    assert escape_data_text(f"\nat {site}") in line


def escape_data_text(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def test_code_scanning_paths_are_relative_to_the_repository_root(repository):
    """mlacheck ran in a subfolder: a site relative to it is located relative to the root."""
    report = hand_made()
    report["findings"][0]["site"] = "backend.py:42"
    inner = Repository(repository.root, repository.root / "engine")
    [result] = [r for r in to_sarif(report, repository=inner)["runs"][0]["results"] if r["ruleId"] == "MLA001"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "engine/backend.py"


# github


def test_github_annotation_escapes_and_locates(repository):
    lines = to_github(hand_made(), repository).splitlines()
    assert lines[0] == (
        "::error file=engine/backend.py,line=42,title=MLA001 serving-path-compile [rank 3 (pid 4242)]::"
        "100%25 of requests stalled\\nsecond line%0Afix: warm up fp8"  # the run's newline escaped, mlacheck's %0A
    )
    assert lines[1].startswith("::error title=MLA004 stale-rule::installed")
    assert lines[2].startswith("::warning file=engine/warmup.py,line=17,title=MLA002 dead-warmup::")
    assert lines[3].startswith("::warning title=mlacheck internal error::")
    assert len(lines) == 4
    assert escape_property("a,b:c%d\r\n") == "a%2Cb%3Ac%25d%0D%0A"


def test_github_real_report_one_line_per_finding(real):
    lines = to_github(real, Repository(ROOT, ROOT)).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["::error"] * 6 + ["::warning"] * 3
    for line, finding in zip(lines, real["findings"]):
        title = f"title={finding['code']} {finding['name']}::"
        if finding["site"].startswith("tests/fixtures/"):  # in the repository
            path, number = finding["site"].rsplit(":", 1)
            assert f" file={path},line={number},{title}" in line
        else:  # the engine line the scenario models
            assert f" {title}" in line and "file=" not in line and "modelled on SGLang 0.5.13" in line
    assert all("\n" not in line and "\r" not in line for line in lines)


def test_write_github_appends_the_step_summary(tmp_path, real):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    stream = io.StringIO()
    write_outputs(real, [("github", None)], stream, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert stream.getvalue() == to_github(real)
    text = summary.read_text()
    assert text.startswith("earlier step\n## mlacheck FAIL")
    assert all(code in text for code in ("MLA001", "MLA002", "MLA003"))
    untouched = tmp_path / "none.md"
    publish(real, {})
    assert not untouched.exists()
    with pytest.raises(MlacheckError, match="GITHUB_STEP_SUMMARY"):
        publish(real, {"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "dir.md")})


# markdown


def test_markdown_lists_every_finding_and_escapes_pipes(real):
    text = to_markdown(real)
    assert text.startswith("## mlacheck FAIL: 6 error(s), 3 warning(s)\n")
    for finding in real["findings"]:
        assert f"**{finding['code']}** {finding['name']} [{finding['severity']}]" in text
    assert text.count("- diff `q_dtype`: precompiled `bfloat16` → dispatched `float8_e4m3fn`") == 3
    [served] = [v for v in real["families"][0]["variants"] if v["dispatches"] == 3]
    stall = served["serving_path_compile_s"]
    assert f"| float8_e4m3fn | False | True | no | — | 3 | serving-path compile ({stall:.1f} s stall) |" in text
    assert "every variant: `d_qk=192`" in text

    made = to_markdown(hand_made())
    assert "| bf\\|16 | yes, 3.9 s | engine/warmup.py:17 | 0 | dead warm-up |" in made
    assert "| warm-up | engine.py:warm\\|up |" in made
    assert "| program | python -m sglang.launch_server --tp 8 (exit code 0) |" in made
    assert "| float8_e4m3fn | no | — | 2 | serving-path compile (41.5 s stall) |" in made
    assert (
        r"rank 3 (pid 4242), at `engine/backend.py:42`: tokenspeed_mla.prefill 100% of requests stalled\\nsecond"
        in made
    )
    for line in made.splitlines():
        if line.startswith("| bf"):
            assert line.replace("\\|", "").count("|") == 6


# outputs


def test_parse_output():
    assert parse_output("sarif:out/r.sarif") == ("sarif", Path("out/r.sarif"))
    assert parse_output("github:-") == ("github", None)
    assert parse_output("junit:C:/r.xml") == ("junit", Path("C:/r.xml"))
    for spec, words in (("xml:r.xml", "unknown format 'xml'"), ("sarif", "FORMAT:PATH"), ("json:", "FORMAT:PATH")):
        with pytest.raises(MlacheckError) as caught:
            parse_output(spec)
        assert str(caught.value).startswith(f"--output {spec}: ") and words in str(caught.value)
        assert "\n" not in str(caught.value)


def test_write_outputs_writes_every_format(tmp_path, real):
    paths = {fmt: tmp_path / f"r.{fmt}" for fmt in ("json", "junit", "sarif", "markdown")}
    stdout = io.StringIO()
    summary = tmp_path / "summary.md"
    write_outputs(
        real,
        output_specs([f"{fmt}:{path}" for fmt, path in paths.items()] + ["github:-"]),
        stdout,
        {"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert json.loads(paths["json"].read_text()) == real
    assert ET.parse(paths["junit"]).getroot().find("testsuite").get("failures") == "6"
    _validate(json.loads(paths["sarif"].read_text()))
    assert paths["markdown"].read_text() == to_markdown(real)
    assert stdout.getvalue() == to_github(real)
    assert summary.read_text() == to_markdown(real) + "\n"


def test_the_read_part_is_made_printable_once_for_every_format_that_reads_it(tmp_path, real, monkeypatch):
    """JUnit and GitHub read the same printable part of a report (the caller's, where it made one for the terminal):
    its text is checked once, and each document is the one it renders alone, a hostile string escaped in both."""
    real["findings"][0]["message"] = "\x1b[2J\nverdict: PASS"
    made = []

    class Counted(common.Readable):
        def __init__(self, *args) -> None:
            made.append(1)
            super().__init__(*args)

    monkeypatch.setattr(common, "Readable", Counted)
    read = common.printable_read(real)
    paths = {fmt: tmp_path / f"r.{fmt}" for fmt in ("junit", "json")}
    stdout = io.StringIO()
    write_outputs(real, [(fmt, path) for fmt, path in paths.items()] + [("github", None)], stdout, {}, read=read)
    assert len(made) == 1
    write_outputs(real, [("junit", tmp_path / "alone.xml"), ("github", None)], io.StringIO(), {})
    assert len(made) == 2  # (no part given: made once for both)
    monkeypatch.undo()
    assert paths["junit"].read_text() == to_junit(real) and stdout.getvalue() == to_github(real)
    assert "\x1b" not in paths["junit"].read_text() + stdout.getvalue()
    assert "\\x1b[2J\\nverdict: PASS" in paths["junit"].read_text() and json.loads(paths["json"].read_text()) == real


def test_every_spec_is_checked_before_anything_is_written(tmp_path, real):
    first = tmp_path / "first.xml"
    with pytest.raises(MlacheckError, match="unknown format 'pdf'"):
        output_specs([f"junit:{first}", "pdf:x.pdf"])
    assert not first.exists()
    missing = tmp_path / "missing" / "r.sarif"
    with pytest.raises(MlacheckError) as caught:
        output_specs([f"sarif:{missing}"])
    assert str(caught.value).startswith(f"--output sarif:{missing}: cannot write") and "\n" not in str(caught.value)
    with pytest.raises(MlacheckError, match="only one document can go to stdout"):
        output_specs(["json:-", "sarif:-"])


# baseline


def test_same_report_as_baseline_passes_and_marks_everything(real):
    before = copy.deepcopy(real)
    result = apply_baseline(real, real)
    assert real == before
    assert result["verdict"] == "pass"
    assert all(finding["baselined"] for finding in result["findings"])
    assert result["baseline"] == {"source": None, "baselined": 9, "new": 0}
    assert to_github(result) == ""
    suite = ET.fromstring(to_junit(result)).find("testsuite")
    assert suite.get("failures") == "0" and suite.get("tests") == "6"
    assert {r["baselineState"] for r in to_sarif(result)["runs"][0]["results"]} == {"unchanged"}
    assert "PASS: 0 error(s), 0 warning(s), 9 baselined" in to_markdown(result)


def test_finding_missing_from_the_baseline_is_new_and_fails(real_reports):
    current, older = copy.deepcopy(real_reports[0]), copy.deepcopy(real_reports[1])
    dropped = older["findings"].pop(1)
    assert dropped["code"] == "MLA001"
    result = apply_baseline(current, older)
    new = [finding for finding in result["findings"] if not finding["baselined"]]
    assert [(f["code"], f["key"]) for f in new] == [(dropped["code"], dropped["key"])]
    assert result["verdict"] == "fail"
    assert to_github(result).count("::error") == 1
    assert ET.fromstring(to_junit(result)).find("testsuite").get("failures") == "1"


def test_new_warning_fails_only_when_strict(real):
    older = copy.deepcopy(real)
    older["findings"] = [f for f in older["findings"] if f["code"] != "MLA002"]
    assert apply_baseline(real, older)["verdict"] == "pass"
    assert apply_baseline({**real, "strict": True}, older)["verdict"] == "fail"
    assert apply_baseline({**real, "strict": True}, real)["verdict"] == "pass"


def test_baseline_file_round_trip_and_both_shapes(tmp_path, real):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format_version": 1, "fingerprints": report_fingerprints(real["findings"])}))
    data = load_baseline(path)
    assert data["format_version"] == 1 and len(data["fingerprints"]) == 9
    assert apply_baseline(real, data)["verdict"] == "pass"
    data["fingerprints"] = data["fingerprints"][1:]
    assert apply_baseline(real, data)["verdict"] == "fail"
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(real))
    assert apply_baseline(real, load_baseline(report_path))["verdict"] == "pass"


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "cannot read it"),
        ("{not json", "not JSON"),
        ('{"fingerprints": [1, 2]}', "neither an mlacheck JSON report"),
        ("[]", "neither an mlacheck JSON report"),
    ],
)
def test_broken_baseline_is_one_line_naming_the_file(tmp_path, content, words):
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(MlacheckError) as caught:
        load_baseline(path)
    message = str(caught.value)
    assert message.startswith(f"--baseline {path}: ") and words in message and "\n" not in message


@pytest.mark.parametrize("columns, width", [(None, 120), ("80", 80)])
def test_a_report_into_a_log_is_as_wide_as_columns_says_or_120(real, tmp_path, columns, width):
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(real))
    env = {name: value for name, value in os.environ.items() if name != "COLUMNS"}
    env.update({"COLUMNS": columns} if columns else {})
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "report", str(saved)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) == width
