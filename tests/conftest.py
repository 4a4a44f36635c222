import signal
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

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


def checked_triton(module: str) -> pytest.MarkDecorator:
    """Skip on Python 3.10 where the installed Triton that the bundled rules' `[triton]` table of `module` names lies
    outside the versions that rule was checked against: pip gives 3.10 no checked release of some (tokenspeed-triton
    3.8), which mlacheck rightly leaves unchecked, and the tests of what the rule watches need a checked one. (From
    3.11 the test runs: a new release there is the rule's to check, and the test's failure says so.)"""
    from mlacheck.rulefiles import load_rules

    rule = load_rules().tritons[module]
    installed = metadata.version(rule.distribution)
    return pytest.mark.skipif(
        sys.version_info < (3, 11) and installed not in SpecifierSet(rule.checked_versions, prereleases=True),
        reason=f"{rule.distribution} {installed} (what pip gives this Python) lies outside the versions the "
        f"{module} rule was checked against",
    )


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
