"""Published releases from PyPI for the tests that run the engines' and libraries' own code (marker `network`):
installed with --no-deps into a folder of their own, put first on the observed program's PYTHONPATH, never into the
test environment. A download that fails skips the test."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


def installed(folder: Path, *requirements: str) -> Path:
    """`pip install --no-deps --target folder` of the requirements (once per folder)."""
    marker = folder / ".installed"
    if not marker.exists():
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--only-binary=:all:",
                "--target",
                str(folder),
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot install {' '.join(requirements)} from PyPI: {done.stderr.strip()[-300:]}")
        marker.write_text("\n".join(requirements))
    return folder


def extracted(folder: Path, requirement: str, prefixes: tuple[str, ...], stubs: tuple[str, ...] = ()) -> Path:
    """The members of a downloaded wheel under `prefixes` (and its .dist-info, whose RECORD tells the provider)
    extracted into `folder`, with an empty module at each of `stubs` (a package's __init__ the test does not need)."""
    marker = folder / ".installed"
    if not marker.exists():
        wheels = folder / "wheels"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                requirement,
                "-d",
                str(wheels),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot download {requirement} from PyPI: {done.stderr.strip()[-300:]}")
        [wheel] = wheels.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            members = [
                name
                for name in archive.namelist()
                if name.startswith(prefixes) or name.split("/")[0].endswith(".dist-info")
            ]
            archive.extractall(folder, members)
        for stub in stubs:
            (folder / stub).write_text("")
        wheel.unlink()
        marker.write_text(requirement)
    return folder


WHEEL_CACHE = Path(os.environ.get("MLACHECK_WHEEL_CACHE", Path.home() / ".cache" / "mlacheck-tests" / "wheels"))


def cached_wheel(requirement: str) -> Path:
    """The published wheel of `requirement` (NAME==VERSION), downloaded once into a cache folder that outlives the run
    (MLACHECK_WHEEL_CACHE, else ~/.cache/mlacheck-tests/wheels): the engines' wheels are hundreds of MB."""
    folder = WHEEL_CACHE / requirement.replace("==", "-")
    found = sorted(folder.glob("*.whl"))
    if not found:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", requirement, "-d",
             str(folder)],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        found = sorted(folder.glob("*.whl"))
        if done.returncode != 0 or not found:
            pytest.skip(f"cannot download {requirement} from PyPI: {done.stderr.strip()[-300:]}")
    return found[0]


def extracted_from(folder: Path, wheel: Path, prefixes: tuple[str, ...], stubs: tuple[str, ...] = ()) -> Path:
    """`extracted`, from a wheel already here (`cached_wheel`)."""
    marker = folder / ".installed"
    if not marker.exists():
        with zipfile.ZipFile(wheel) as archive:
            members = [
                name
                for name in archive.namelist()
                if name.startswith(prefixes) or name.split("/")[0].endswith(".dist-info")
            ]
            archive.extractall(folder, members)
        for stub in stubs:
            (folder / stub).write_text("")
        marker.write_text(wheel.name)
    return folder


def first_on_path(*folders: Path) -> dict[str, str]:
    """The observed program's PYTHONPATH with these folders first."""
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
