"""The report a person reads, through the real CLI (--compile skip: seconds on the CPU): 80 columns, -q, -v, and
scenario sites that name the engine's code the scenario models, never mlacheck's own files."""

from __future__ import annotations

import json
import re
import sys

import pytest

from mlacheck.codes import CODES
from tests.integration.cli import run_cli

EAGER_DECODE = ("run", "--compile", "skip", "--profile", "tokenspeed", "--cuda-graph", "off")
TOKENSPEED = "tokenspeed/runtime/layers/attention/backends/paged/tokenspeed_mla.py"


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    """TokenSpeed's enforce-eager start-up: four MLA001 on decode (the README's table), at 80 columns."""
    tmp_path = tmp_path_factory.mktemp("eager")
    result = run_cli(*EAGER_DECODE, tmp_path=tmp_path, env_extra={"COLUMNS": "80"})
    assert result.code == 1, result.stdout + result.stderr
    return result


def findings_part(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    return lines[lines.index("Findings") + 1 : -1]


def test_a_decode_finding_at_80_columns_is_two_lines_at_most_and_the_fix_is_said_once(eager):
    lines = eager.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    part = findings_part(eager.stdout)
    starts = [index for index, line in enumerate(part) if line.startswith("MLA001 tokenspeed_mla.decode ")]
    fixed = next(index for index, line in enumerate(part) if line.strip().startswith("fix MLA"))
    assert len(starts) == 4
    for first, end in zip(starts, [*starts[1:], fixed]):
        block = part[first:end]
        assert len(block) <= 2, block  # the line, and its site and diff (before: a line, a diff and a fix, 5-6 lines)
        assert all(line.startswith("       ") for line in block[1:]), block  # continuation lines stay indented
        assert " ".join(block).count("diff ") == 1 and "reducer_max_splits 32→" in " ".join(block)
        assert "fix" not in " ".join(block)
    fixes = [line for line in part if line.strip().startswith("fix MLA001: ")]
    assert len(fixes) == 1  # the fix once for the code, not once per finding
    assert not any("torch_dtype=" in line for line in part)  # the 25-field key is not printed (--verbose has it)
    assert f"{TOKENSPEED.rsplit('/', 1)[1]}:724*" in eager.stdout
    assert "* modelled on tokenspeed 0.1.1" in eager.stdout
    assert len(lines) <= 55, len(lines)  # 120 before the previous rework, 71 before this one


def test_table_headers_wrap_at_underscores_never_inside_a_word(eager):
    lines = eager.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("tokenspeed_mla.decode  ("))
    header = lines[title + 1 : title + 3]
    assert header[0].split() == ["is_workspace_"] and header[1].split()[0] == "size_zero"
    assert header[1].split()[1:] == ["reducer_max_splits", "compiled", "dispatches", "status"]
    statuses = [line.split()[-2:] for line in lines[title + 3 : title + 8]]
    assert statuses == [["2", "ok"]] + [["serving-path", "compile"]] * 4  # whole, never "serving-pa"


def test_quiet_is_the_findings_and_the_verdict_line(tmp_path):
    result = run_cli(*EAGER_DECODE, "-q", env_extra={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert result.code == 1 and lines[0] == "Findings" and lines[-1].startswith("verdict: FAIL")
    assert "mlacheck report" not in result.stdout and "every variant" not in result.stdout


def test_verbose_prints_the_full_key_once_per_finding(tmp_path):
    result = run_cli(*EAGER_DECODE, "-v", env_extra={"COLUMNS": "200"})
    part = findings_part(result.stdout)
    keys = [line for line in part if line.strip().startswith("key (torch_dtype=")]
    assert len(keys) == 4 and all(line.count("torch_dtype=") == 1 for line in keys)
    text = " ".join(line.strip() for line in part)  # a site may wrap onto the next line
    assert text.count(f"{TOKENSPEED}:724 CuteDSLMLABackend.forward_decode (modelled on tokenspeed 0.1.1)") == 4


def test_scenario_sites_name_the_engine_code_they_model(eager):
    report = eager.report
    [decode] = [f for f in report["families"] if f["name"] == "tokenspeed_mla.decode"]
    [prefill] = [f for f in report["families"] if f["name"] == "tokenspeed_mla.prefill"]
    for finding in report["findings"]:
        assert finding["site"] == f"{TOKENSPEED}:724 CuteDSLMLABackend.forward_decode (modelled on tokenspeed 0.1.1)"
        assert finding["stack"] == [finding["site"]]
    assert {v["compiled_by"] for v in prefill["variants"]} == {
        f"{TOKENSPEED}:259 CuteDSLMLABackend.__init__ (modelled on tokenspeed 0.1.1)"
    }
    assert {v["first_dispatch_site"] for v in prefill["variants"]} == {
        f"{TOKENSPEED}:818 CuteDSLMLABackend.forward_extend_chunked (modelled on tokenspeed 0.1.1)"
    }
    assert decode["variants"][0]["compiled_by"].startswith(f"{TOKENSPEED}:724 ")
    assert "mlacheck/" not in json.dumps(
        [report["findings"], [v for f in report["families"] for v in f["variants"]]]
    ), "a site names a file of mlacheck"


@pytest.mark.parametrize(
    "profile, prefix_chunk",
    [
        (
            ("sglang@0.5.13",),
            "sglang/srt/layers/attention/tokenspeed_mla_backend.py:324 TokenspeedMLABackend._run_prefill_kernel",
        ),
        (
            ("vllm", "--prefill-backend", "tokenspeed_mla"),
            "vllm/v1/attention/backends/mla/prefill/tokenspeed_mla.py:180 "
            "TokenspeedMLAPrefillBackend.run_prefill_context_chunk",
        ),
        (
            ("vllm",),
            "vllm/v1/attention/backends/mla/prefill/flash_attn.py:492 FlashAttnPrefillBackend.run_prefill_context_chunk",
        ),
    ],
    ids=["sglang@0.5.13", "vllm tokenspeed_mla", "vllm fa4"],
)
def test_each_profile_names_its_own_engine_lines(tmp_path, profile, prefix_chunk):
    result = run_cli("run", "--compile", "skip", "--kernel", "prefill", "--profile", *profile, tmp_path=tmp_path)
    assert result.report is not None, result.stdout + result.stderr
    [family] = [f for f in result.report["families"] if f["variants"] and not f["name"].endswith(("cumsum", "ler"))]
    sites = {v["first_dispatch_site"] for v in family["variants"]} | {v["compiled_by"] for v in family["variants"]}
    assert any(site.startswith(prefix_chunk + " (modelled on ") for site in sites if site), sites
    assert not any(re.search(r"mlacheck/", site or "") for site in sites), sites


def test_a_users_warmup_keeps_its_own_site(tmp_path):
    result = run_cli(
        "run",
        "--compile",
        "skip",
        "--kernel",
        "prefill",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        "tests/fixtures/sglang_warmup.py:fp8_warmup",
        tmp_path=tmp_path,
    )
    [family] = result.report["families"]
    assert {v["compiled_by"] for v in family["variants"]} == {"tests/fixtures/sglang_warmup.py:17"}


CPU_PROGRAM = """
import os
os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
import tokenspeed_mla, torch
tokenspeed_mla.warmup_compile_prefill(q_dtype=torch.float8_e4m3fn, d_qk=192, d_v=128, enable_pdl=True)
q, k = (torch.randn(64, 16, 192).to(torch.float8_e4m3fn) for _ in range(2))
v = torch.randn(64, 16, 128).to(torch.float8_e4m3fn)
cum = torch.tensor([0, 64], dtype=torch.int32)
tokenspeed_mla.tokenspeed_mla_prefill(q, k, v, cum[1:], cum, 64, 1, 192**-0.5, True, True, enable_pdl=True)
print("prefill returned")
"""


def test_a_dispatch_that_died_for_want_of_a_cuda_device_says_to_add_dry(tmp_path):
    """Real tokenspeed_mla on a CPU-only torch (or a CUDA build without a GPU): without --dry its dispatch dies before
    the lookup; the report says why and what to do, and the unevaluated contracts are one line."""
    program = tmp_path / "cpu.py"
    program.write_text(CPU_PROGRAM)
    command = ("--compile", "skip", "--", sys.executable, str(program))
    plain = run_cli("run", "--run-dir", str(tmp_path / "plain"), *command, env_extra={"COLUMNS": "1000"})
    assert plain.code == 2, plain.stdout + plain.stderr
    [reason] = [line for line in plain.stdout.splitlines() if line.startswith("incomplete: ")]
    import torch

    said = (
        "AssertionError: Torch not compiled with CUDA enabled" if torch.version.cuda is None else "RuntimeError: Found"
    )
    assert f"({said}" in reason  # (a CUDA build of torch without a GPU: "Found no NVIDIA driver on your system")
    assert reason.rstrip().endswith(
        "run it with --dry (pytest: --mlacheck-dry), which takes the watched dispatches past their lookup without one"
    )
    [unchecked] = [line for line in plain.stdout.splitlines() if line.startswith("not checked: ")]
    assert unchecked.rstrip() == (
        "not checked: 3 contract(s) lack run context: give --context d_qk=... d_v=... engine=... (--verbose lists them)"
    )
    dry = run_cli("run", "--dry", "--run-dir", str(tmp_path / "dry"), *command, tmp_path=tmp_path)
    assert "prefill returned" in dry.stdout and dry.code == 0, dry.stdout + dry.stderr
    assert "--dry" not in " ".join(dry.report["incomplete"])


def test_the_help_s_command_list_is_whole_at_80_columns():
    shown = run_cli("--help", env_extra={"COLUMNS": "80"}).stdout
    commands = shown[shown.index("Commands:") :].splitlines()[1:]
    assert len(commands) >= 7 and not [line for line in commands if line.rstrip().endswith("...")], commands


def test_rule_prints_a_codes_page_and_rules_fits_80_columns():
    page = run_cli("rule", "MLA001", env_extra={"COLUMNS": "80"})
    assert page.code == 0 and page.stdout.startswith("# serving-path-compile (MLA001)\n"), page.stderr
    assert "## How to silence it" in page.stdout and "--ignore MLA001" in page.stdout
    every = run_cli("rule", "--all")
    assert every.code == 0 and every.stdout.count("## How to fix it") == len(CODES)
    misspelt = run_cli("rules", "MLA001")
    assert misspelt.code == 2 and misspelt.stderr.strip() == (
        "mlacheck: error: mlacheck rules takes no code; a code's page: mlacheck rule MLA001"
    )
    unknown = run_cli("rule", "MLA999")
    assert unknown.code == 2 and unknown.stderr.startswith("mlacheck: error: rule MLA999: no such finding code")
    rules = run_cli("rules", env_extra={"COLUMNS": "80"})
    lines = rules.stdout.splitlines()
    assert rules.code == 0 and max(len(line) for line in lines) <= 80
    assert len(lines) < 100, len(lines)  # 322 before: the 64 FA4 key fields folded into a column
    assert "flash_attn_4.fwd                        64 fields  flash-attn-4 ==4.0.0b36" in rules.stdout  # one line each
    verbose = run_cli("rules", "-v", env_extra={"COLUMNS": "80"})
    assert "64 fields: mla_1cta, mla_1cta_kb64, mla_1cta_s_ahead, dtype," in verbose.stdout
