"""Program mode on FlashAttention-4 (a dict inside a JITCache object, reached by a dotted path; lookup by `in`),
its real dispatch under FakeTensorMode on the CPU. Needs the fa4 extra (pip install '.[fa4]')."""

import sys

import pytest

from tests.integration.cli import ROOT, run_cli

pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "fa4_engine.py")
FWD = "flash_attn_4.fwd"


def test_a_shape_the_warmup_missed_compiles_on_the_serving_path(tmp_path):
    result = run_cli("run", "--compile", "skip", "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM,
                     tmp_path=tmp_path)
    assert result.code == 1, result.stdout + result.stderr
    assert "fa4 engine done" in result.stdout
    report = result.report
    [family] = [f for f in report["families"] if f["name"] == FWD]
    assert family["version"] == "4.0.0b36" and len(family["key_fields"]) == 64
    by_head_dim = {v["key"]["head_dim"]: v for v in family["variants"]}
    assert by_head_dim[128]["precompiled"] and by_head_dim[128]["compile_phase"] == "warmup"
    assert by_head_dim[128]["dispatches"] == 2  # the two served batches hit the warm-up's variant
    assert by_head_dim[128]["compiled_by"].startswith("tests/fixtures/programs/fa4_engine.py:")
    [finding] = report["findings"]
    assert finding["code"] == "MLA001" and finding["diff"] == {"head_dim": [128, 64], "head_dim_v": [128, 64]}
    assert "(batch_size=1, seqlen_q=256, total_q=256, num_head=16)" in finding["message"]
    assert report["processes"][0]["exited"] and report["incomplete"] == []
