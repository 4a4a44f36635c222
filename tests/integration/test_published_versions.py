"""The rule files against the tokenspeed-mla releases the engines pin, downloaded from PyPI: tokenspeed-mla 0.2.16
(TokenSpeed 0.1.1, through tokenspeed-kernel 0.1.4) and 2.0.3 (vLLM 0.34.0). A rule records the fingerprint of
the code its key depends on, so MLA004 fires on changed code, not on a version number."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlacheck.rulefiles import load_rules
from mlacheck.rulefiles.versions import checks_version

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """version -> folder holding that release's tokenspeed_mla/*.py."""
    folder = tmp_path_factory.mktemp("published")
    releases = {}
    for version in ("0.2.16", "2.0.3"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"tokenspeed-mla=={version}",
                "-d",
                str(folder / version),
            ],
            capture_output=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot download tokenspeed-mla {version} from PyPI")
        [wheel] = (folder / version).glob("*.whl")
        zipfile.ZipFile(wheel).extractall(folder / version)
        releases[version] = folder / version / "tokenspeed_mla"
    return releases


FINGERPRINT = """
import importlib, sys
from mlacheck.capture.fingerprint import fingerprint
from mlacheck.rulefiles import load_rules
module = importlib.import_module(sys.argv[2])
print(fingerprint(module, load_rules().family(sys.argv[1]).family.key_functions))
"""


def fingerprint(family: str, source) -> str:
    """The rule's fingerprint of `source` (a release's tokenspeed_mla/NAME.py), imported in a process of its own as a
    module of its own release, whatever tokenspeed-mla is installed (its imports resolve within the release: 2.0.3's
    decode imports a module 0.2.16 lacks, which Python 3.10 installs)."""
    release = source.parent.parent
    done = subprocess.run(
        [sys.executable, "-c", FINGERPRINT, family, f"tokenspeed_mla.{source.stem}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(release), str(ROOT)])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1]


@pytest.mark.parametrize("version", ["0.2.16", "2.0.3"])
def test_prefill_code_of_the_pinned_releases_is_the_checked_code(published, version):
    rule = load_rules().family("tokenspeed_mla.prefill").family
    assert fingerprint("tokenspeed_mla.prefill", published[version] / "mla_prefill.py") in rule.fingerprints
    assert checks_version(rule, version)


def test_decode_code_of_the_pinned_releases_is_checked_code(published):
    """2.0.3 has 2.0.4's decode; 0.2.16 decides pack_q from an opt-in argument: another fingerprint, also checked."""
    rule = load_rules().family("tokenspeed_mla.decode").family
    current, pinned_by_tokenspeed = rule.fingerprints
    assert fingerprint("tokenspeed_mla.decode", published["2.0.3"] / "mla_decode.py") == current
    assert fingerprint("tokenspeed_mla.decode", published["0.2.16"] / "mla_decode.py") == pinned_by_tokenspeed
    assert checks_version(rule, "2.0.3") and checks_version(rule, "0.2.16") and not checks_version(rule, "0.2.15")
