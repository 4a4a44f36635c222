"""The warm-up manifest closes the loop: precompiling from it makes the same traffic clean."""

import json
import sys

from tests.integration.cli import ROOT, run_cli

LOADER = ROOT / "tests" / "fixtures" / "manifest_warmup.py"


def test_manifest_of_dispatched_variants_makes_the_warmup_complete(tmp_path):
    first = run_cli(
        "run",
        "--compile",
        "skip",
        "--kernel",
        "prefill",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        "library",
        tmp_path=tmp_path,
    )
    assert first.code == 1
    manifest_path = tmp_path / "manifest.json"
    written = run_cli("manifest", str(tmp_path / "report.json"), "-o", str(manifest_path))
    assert written.code == 0, written.stderr
    manifest = json.loads(manifest_path.read_text())
    [family] = manifest["families"]
    assert family["module"] == "tokenspeed_mla.mla_prefill" and len(family["variants"]) == 3
    assert {(v["is_causal"], v["return_lse"]) for v in family["variants"]} == {
        (True, True),
        (False, True),
        (True, False),
    }
    assert all(
        v["q_dtype"] == "float8_e4m3fn" and v["d_qk"] == 192 and v["enable_pdl"] is True for v in family["variants"]
    )
    again = run_cli(
        "run",
        "--compile",
        "skip",
        "--kernel",
        "prefill",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        f"{LOADER}:precompile_from_manifest",
        tmp_path=tmp_path,
        env_extra={"WARMUP_MANIFEST": str(manifest_path)},
    )
    assert again.code == 0, again.stdout + again.stderr
    assert again.report["findings"] == []


def test_manifest_from_a_program_run_folder(tmp_path):
    rules = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
    program = ROOT / "tests" / "fixtures" / "programs" / "backend.py"
    run_cli(
        "run",
        "--rules",
        rules,
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(program),
        env_extra={"PYTHONPATH": str(ROOT)},
    )
    written = run_cli("manifest", str(tmp_path / "run"), "-o", str(tmp_path / "m.json"))
    assert written.code == 0, written.stderr
    [family] = json.loads((tmp_path / "m.json").read_text())["families"]
    assert sorted(v["causal"] for v in family["variants"]) == [False, True]


def test_the_ci_page_shows_the_loader_that_the_test_runs():
    page = (ROOT / "docs" / "ci.md").read_text()
    assert LOADER.read_text().strip() in page
