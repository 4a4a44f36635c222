"""Program mode on real tokenspeed_mla decode (a functools.cache family), on the CPU under --dry --compile skip."""

import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "decode_engine.py")
DECODE = "tokenspeed_mla.decode"


@pytest.fixture
def rules(tmp_path):
    """The bundled rules plus the fixture engine's capture frame."""
    folder = tmp_path / "rules"
    folder.mkdir()
    for path in [*BUNDLED.glob("*.toml"), ROOT / "tests" / "fixtures" / "decode_engine.toml"]:
        shutil.copy(path, folder)
    return folder


def observe(tmp_path, rules, *program_args):
    return run_cli(
        "run",
        "--dry",
        "--compile",
        "skip",
        "--rules",
        str(rules),
        "--run-dir",
        str(tmp_path / "run"),
        "--context",
        "num_heads=128",
        "--context",
        "kv_cache_dtype=float8_e4m3fn",
        "--",
        sys.executable,
        PROGRAM,
        *program_args,
        tmp_path=tmp_path,
    )


def test_captured_ladder_is_never_dead_and_eager_batches_outside_it_compile_on_the_serving_path(tmp_path, rules):
    result = observe(tmp_path, rules)
    assert result.code == 1, result.stdout + result.stderr
    assert "decode engine done" in result.stdout and result.report["program"]["exit_code"] == 0
    [family] = [f for f in result.report["families"] if f["name"] == DECODE]
    captured = [v for v in family["variants"] if v["compile_phase"] == "capture"]
    assert len(captured) == 2 and all(v["captured"] for v in captured)
    assert [f for f in result.report["findings"] if f["code"] == "MLA002"] == []
    serving = sorted((f for f in result.report["findings"] if f["code"] == "MLA001"), key=lambda f: f["site"] or "")
    assert len(serving) == 2
    for finding in serving:
        assert set(finding["diff"]) <= {"is_workspace_size_zero", "reducer_d_tiles", "reducer_max_splits"}
        assert finding["site"].endswith("decode_engine.py:23")  # the program's own call, not the library's lookup
    assert sorted(f["message"].split("(B=")[1].split(",")[0] for f in serving) == ["12", "40"]
    assert result.report["not_checked"] == []  # --context gave what the decode contracts need


def test_a_positionally_spelled_warmup_is_compiled_twice(tmp_path, rules):
    result = observe(tmp_path, rules, "positional-warmup")
    [spelling] = [f for f in result.report["findings"] if f["code"] == "MLA006"]
    assert "spelled 24 positional, 1 by keyword at tests/fixtures/programs/decode_engine.py:" in spelling["message"]
    assert "spelled 25 by keyword at tests/fixtures/programs/decode_engine.py:23 (capture)" in spelling["message"]
    assert [f for f in result.report["findings"] if f["code"] == "MLA002"] == []  # the MLA006 says it all
    [family] = [f for f in result.report["families"] if f["name"] == DECODE]
    twice = [v for v in family["variants"] if v["key"]["reducer_max_splits"] == 32]
    assert len(twice) == 2 and {v["spelling"]["keywords"] == ["partial_fp16"] for v in twice} == {True, False}
