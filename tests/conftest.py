import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def synthetic_rule():
    from mlacheck.rules import load_rule_file

    return load_rule_file(FIXTURES / "synthetic.toml")


@pytest.fixture
def synthetic():
    from tests.fixtures import synthetic_kernels

    synthetic_kernels.reset()
    yield synthetic_kernels
    synthetic_kernels.reset()
