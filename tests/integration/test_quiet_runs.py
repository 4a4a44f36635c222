"""A scenario run prints nothing of the libraries it drives (issue 31): torch's warning on the data pointer of dry
mode's fake tensors, CUTLASS's on FA4's `aux_data` argument, CUTLASS's on FlashInfer's NamedBarrier are mlacheck's
doing, not the user's: held back and counted in the header; -v shows them. A user's own warm-up function's warnings
stay shown. Real CLI runs in subprocesses, stderr read as a terminal shows it."""

import pytest

from tests.integration.cli import ROOT, run_cli
from tests.integration.published import first_on_path, installed
from tests.integration.test_published_flashinfer import FLASHINFER

LIBRARY_WARNINGS = ("FakeTensor", "UserWarning", "Warning:", "NamedBarrier", "JitArgument")


def quiet(result) -> dict[str, str]:
    """The run's header rows; its stderr has none of the libraries' warnings."""
    assert result.report is not None, result.stdout + result.stderr
    assert not [needle for needle in LIBRARY_WARNINGS if needle in result.stderr], result.stderr
    return {row[0]: row[1] for row in result.report["scenario"]["header"]}


def test_the_fake_tensor_warning_of_dry_fa4_is_held_back_and_counted(tmp_path):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", "--compile", "skip", tmp_path=tmp_path)
    assert result.code == 1 and result.stderr == "", result.stderr
    header = quiet(result)
    assert header["library warnings"] == "1 from the libraries the scenario drives, hidden (-v shows them)"
    assert "library warnings" in result.stdout


def test_verbose_shows_what_was_held_back(tmp_path):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", "--compile", "skip", "-v", tmp_path=tmp_path)
    assert "Accessing the data pointer of FakeTensor" in result.stderr and "UserWarning" in result.stderr
    assert result.report is not None and "library warnings" not in dict(
        (row[0], row[1]) for row in result.report["scenario"]["header"]
    )


def test_a_users_own_warm_up_warns_as_python_shows_it(tmp_path):
    (tmp_path / "run").mkdir()
    warmup = tmp_path / "my_warmup.py"
    warmup.write_text(
        "import warnings\n\n\ndef warm(q_dtype, d_qk, d_v, enable_pdl):\n"
        "    warnings.warn('my warm-up: d_qk is ' + str(d_qk))\n"
    )
    result = run_cli(
        "run", "--kernel", "prefill", "--compile", "skip", "--warmup", f"{warmup}:warm", tmp_path=tmp_path / "run"
    )
    assert result.report is not None, result.stderr
    assert "my_warmup.py:5: UserWarning: my warm-up: d_qk is 192" in result.stderr


@pytest.mark.compile
def test_cutlass_warnings_of_real_fa4_compiles_are_held_back(tmp_path):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", tmp_path=tmp_path)
    header = quiet(result)
    assert int(header["library warnings"].split()[0]) >= 2  # the FakeTensor one and CUTLASS's per compiled kernel


@pytest.mark.compile
@pytest.mark.network
def test_the_named_barrier_warning_of_flashinfer_decode_compiles_is_held_back(tmp_path, tmp_path_factory):
    flashinfer = installed(tmp_path_factory.mktemp("flashinfer"), *FLASHINFER)
    result = run_cli(
        "run",
        "--profile",
        "sglang",
        "--cuda-graph-max-bs",
        "1",
        "--batch-sizes",
        "1",
        tmp_path=tmp_path,
        env_extra=first_on_path(flashinfer, ROOT),
    )
    assert result.code == 0, result.stdout
    assert quiet(result)["library warnings"].startswith("1 from the libraries")
