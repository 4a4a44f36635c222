"""The embedded scenario's results table (docs/scenario.md) is what the runs give today (marker `network`: the sglang rows run FlashInfer,
flashinfer-python 0.7.2 from PyPI)."""

import os
import subprocess
import sys

import pytest

from tests.integration.cli import ROOT
from tests.integration.published import first_on_path, installed
from tests.integration.test_published_flashinfer import FLASHINFER

pytestmark = pytest.mark.network


def test_the_scenario_results_table_matches_the_runs(tmp_path_factory):
    flashinfer = installed(tmp_path_factory.mktemp("flashinfer"), *FLASHINFER)
    done = subprocess.run(
        [sys.executable, "-m", "tests.readme_results", "--check"],
        cwd=ROOT,
        env={**os.environ, **first_on_path(flashinfer, ROOT)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
