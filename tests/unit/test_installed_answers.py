"""What the installed distributions answer is asked once a run, not once a process (capture/installed.py), and never
from another installation: a fork installed over a library between two processes of the run is seen by the second
(a rule written for the library would otherwise watch the fork's cache), and an answers file that is not what
mlacheck wrote is asked again."""

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASK = """
import json, sys
from mlacheck.capture import installed
from mlacheck.capture.fingerprint import installed_version, providers
from mlacheck.capture.layouts import provider

installed.share(lambda digest: f"{sys.argv[1]}/installed-{digest}.json")
import mlafake

found = provider(mlafake)
print(json.dumps({
    "provider": [found.distribution, found.version, found.verified],
    "version": installed_version("mlafake"),
    "providers": providers("mlafake"),
    "asked": "importlib.metadata" in sys.modules,
}))
"""


def install(site: Path, name: str, version: str) -> None:
    """`name` version `version` installs the package mlafake (its file, hashed in the RECORD), as pip would."""
    package = site / "mlafake"
    package.mkdir(exist_ok=True)
    source = package / "__init__.py"
    if not source.exists():
        source.write_text("VALUE = 1\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(source.read_bytes()).digest()).rstrip(b"=").decode()
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text("mlafake\n")
    (info / "RECORD").write_text(f"mlafake/__init__.py,sha256={digest},{source.stat().st_size}\n{info.name}/RECORD,,\n")


def ask(site: Path, run_dir: Path, script: str = ASK) -> object:
    """What a fresh process with `site` on its path prints (JSON) running `script` with the run folder as argument."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(run_dir)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_second_process_of_a_run_asks_nothing(tmp_path):
    site, run_dir = tmp_path / "site", tmp_path / "run"
    site.mkdir(), run_dir.mkdir()
    install(site, "mlafake", "1.0")
    first, second = ask(site, run_dir), ask(site, run_dir)
    assert first["provider"] == ["mlafake", "1.0", True] and first["version"] == "1.0" and first["asked"]
    assert first["providers"] == ["mlafake 1.0"]
    assert {**second, "asked": True} == first and not second["asked"]  # the same answers, importlib.metadata unloaded
    [shared] = run_dir.glob("installed-*.json")
    assert json.loads(shared.read_text())["format_version"] == 1


def test_a_fork_installed_between_two_processes_is_seen(tmp_path):
    site, run_dir = tmp_path / "site", tmp_path / "run"
    site.mkdir(), run_dir.mkdir()
    install(site, "mlafake", "1.0")
    assert ask(site, run_dir)["provider"] == ["mlafake", "1.0", True]
    module = site / "mlafake" / "__init__.py"
    before = module.stat()
    shutil.rmtree(site / "mlafake-1.0.dist-info")
    install(site, "mlafork", "1.0")  # the same file, now the fork's; the same version
    assert module.stat().st_mtime_ns == before.st_mtime_ns and module.stat().st_ino == before.st_ino
    after = ask(site, run_dir)
    assert after["asked"] and after["provider"] == ["mlafork", "1.0", True] and after["version"] is None
    assert after["providers"] == ["mlafork 1.0"]
    assert len(list(run_dir.glob("installed-*.json"))) == 2  # one file an installation


def test_an_answers_file_mlacheck_did_not_write_is_asked_again(tmp_path):
    site, run_dir = tmp_path / "site", tmp_path / "run"
    site.mkdir(), run_dir.mkdir()
    install(site, "mlafake", "1.0")
    ask(site, run_dir)
    [shared] = run_dir.glob("installed-*.json")
    document = json.loads(shared.read_text())
    answers = document["answers"]
    for question in answers:  # every answer of the wrong shape, or wrong
        answers[question] = {"version": 7}.get(question.partition(" ")[0], [["not", "a", "name"]])
    shared.write_text(json.dumps(document))
    assert ask(site, run_dir)["provider"] == ["mlafake", "1.0", True]
    for broken in ("[", json.dumps({**document, "format_version": 99}), json.dumps({**document, "installation": []})):
        shared.write_text(broken)
        again = ask(site, run_dir)
        assert again["asked"] and again["provider"] == ["mlafake", "1.0", True] and again["version"] == "1.0"


def test_the_supervisor_answers_ahead_for_a_burst_of_workers(tmp_path):
    """`mlacheck run` asks before the program starts what its processes will ask: 16 workers that import a watched
    family at once ask nothing of importlib.metadata, and the family's distribution and version are still recorded."""
    program = """
import json, multiprocessing, sys

def worker(queue):
    from tests.fixtures import synthetic_kernels
    synthetic_kernels.warmup(dtypes=("fp8",), causal=(True,))
    queue.put("importlib.metadata" in sys.modules)

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=worker, args=(queue,)) for _ in range(16)]
    for process in workers:
        process.start()
    print(json.dumps([queue.get() for _ in workers]))
    for process in workers:
        process.join()
"""
    (tmp_path / "burst.py").write_text(program)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--allow-incomplete", "--run-dir", str(run_dir)]
        + [
            "--rules",
            str(ROOT / "tests" / "fixtures" / "synthetic.toml"),
            "--",
            sys.executable,
            str(tmp_path / "burst.py"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert json.loads(done.stdout.splitlines()[0]) == [False] * 16, done.stdout + done.stderr
    families = [
        json.loads(line)
        for trace in run_dir.glob("trace-*.jsonl")
        for line in trace.read_text().splitlines()
        if '"type":"family"' in line
    ]
    assert len(families) == 16
    assert {(event["distribution"], event["version"]) for event in families} == {("mlacheck", installed_version())}


def installed_version() -> str:
    from importlib import metadata

    return metadata.version("mlacheck")


def test_the_supervisor_asks_every_package_in_one_pass(tmp_path):
    """`ask_distributions` answers each package as `distributions_of` alone does (by top_level.txt, else by RECORD),
    from one pass over the distributions, and writes the shared file once."""
    site, run_dir = tmp_path / "site", tmp_path / "run"
    site.mkdir(), run_dir.mkdir()
    install(site, "mlafake", "1.0")
    install(site, "mlafork", "2.0")
    (site / "mlafork-2.0.dist-info" / "top_level.txt").unlink()  # found by its RECORD
    script = """
import json, sys
from unittest import mock
from mlacheck.capture import fingerprint, installed

installed.share(lambda digest: f"{sys.argv[1]}/installed-{digest}.json")
packages = ["mlafake", "absent", "mlacheck"]
alone = {package: list(fingerprint._distributions_of([package])[package]) for package in packages}
with mock.patch.object(fingerprint, "_distributions_of", wraps=fingerprint._distributions_of) as passes:
    with mock.patch.object(installed, "_save", wraps=installed._save) as saves:
        installed.at_once(lambda: fingerprint.ask_distributions(packages))
asked = {package: list(fingerprint.distributions_of(package)) for package in packages}
print(json.dumps([alone, asked, passes.call_count, saves.call_count]))
"""
    alone, asked, passes, saves = ask(site, run_dir, script)
    assert alone == asked and asked["mlafake"] == ["mlafake", "mlafork"] and asked["absent"] == []
    assert passes == 1 and saves == 1
