"""The CLI under the oldest typer mlacheck allows (marker `network`: typer 0.16.0 from PyPI, first on the path). Its
`ctx.params` holds click's strings where newer releases hold the Enum members: an option read from there must mean
the same either way (before: every scenario run failed in one line on the H200's image, and `--cuda-graph off` would
have been read as on)."""

import pytest

from tests.integration.cli import run_cli
from tests.integration.published import first_on_path, installed

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def old_typer(tmp_path_factory):
    return first_on_path(installed(tmp_path_factory.mktemp("typer"), "typer==0.16.0"))


def test_the_scenario_reads_its_choices_under_the_oldest_typer(tmp_path, old_typer):
    result = run_cli(
        "run", "--compile", "skip", "--kernel", "decode", "--cuda-graph", "off", tmp_path=tmp_path, env_extra=old_typer
    )
    assert result.report is not None, result.stderr
    assert result.report["scenario"]["cuda_graph"] is False and result.report["scenario"]["kernels"] == ["decode"]
    assert run_cli("run", "--help", env_extra=old_typer).code == 0
