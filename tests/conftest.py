import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    """The tests send real signals to the programs they start, which must meet them with the default actions. A
    pytest started in the background (nohup ignores SIGHUP; a shell without job control, SIGINT) would hand the
    ignoring on to every program it starts: where a signal is ignored here, a handler that does nothing takes its
    place (pytest still ignores it; its children start with the default, as a handled signal is reset at exec)."""
    for signum in (signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, lambda number, frame: None)


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
