"""What mlacheck's .pth costs every Python process of a user with no run of its own, measured in one run (A B B A
turns of `python -c pass`, medians in ms), in a private mount namespace (a private /tmp: no other run on the machine
is registered) as a second user (uid 2001):
1. no run anywhere: the .pth installed vs an empty .pth in its place;
2. another user (uid 2002) has made /tmp/mlacheck-2001/runs with 300 000 entries: with the squat vs without it;
3. another run of the same user is registered (a root the process does not descend from): with it vs without it;
4. with --before DIR (a checkout of an earlier mlacheck, e.g. `git archive main`): cases 2 and 3 with that
   checkout's .pth and package, to compare.
Needs root, unshare(1) and setpriv(1). Usage (from the repository root):
    python tests/benchmarks/bench_start_path.py [--before DIR] [--turns N]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VICTIM, ATTACKER = 2001, 2002
PTH = Path(sysconfig.get_paths()["purelib"]) / "mlacheck-startup.pth"


def as_victim(command: list[str], pythonpath: str) -> list[str]:
    env = [f"PATH={os.path.dirname(sys.executable)}:/usr/bin:/bin", "HOME=/tmp", f"PYTHONPATH={pythonpath}"]
    return ["setpriv", f"--reuid={VICTIM}", f"--regid={VICTIM}", "--clear-groups", "env", "-i", *env, *command]


def start_ms(pythonpath: str) -> float:
    started = time.perf_counter()
    subprocess.run(as_victim([sys.executable, "-c", "pass"], pythonpath), check=True)
    return (time.perf_counter() - started) * 1e3


def abba(turns: int, arm_a, arm_b, pythonpath: str) -> tuple[float, float]:
    """Medians (ms) of `python -c pass` under arm A and arm B (each a function that sets the machine up)."""
    times: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(turns):
        for arm in "ABBA":
            (arm_a if arm == "A" else arm_b)()
            times[arm].append(start_ms(pythonpath))
    return statistics.median(times["A"]), statistics.median(times["B"])


def inside(turns: int, before: str | None) -> None:
    """The measurements (as root, in the private namespace set up by `main`)."""
    empty = "/tmp/empty.pth"
    Path(empty).write_text("")
    pth_text = PTH.read_text()

    def pth(text: str) -> None:
        subprocess.run(["umount", str(PTH)], stderr=subprocess.DEVNULL)
        Path("/tmp/this.pth").write_text(text)
        subprocess.run(["mount", "--bind", "/tmp/this.pth", str(PTH)], check=True)

    def without() -> None:
        subprocess.run(["umount", str(PTH)], stderr=subprocess.DEVNULL)
        subprocess.run(["mount", "--bind", empty, str(PTH)], check=True)

    squat, hidden = "/tmp/mlacheck-2001", "/tmp/.squat"
    subprocess.run(
        ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups", sys.executable, "-c", SQUAT],
        check=True,
    )
    os.rename(squat, hidden)

    def squatted() -> None:
        if os.path.exists(hidden):
            os.rename(hidden, squat)

    def free() -> None:
        if os.path.exists(squat):
            os.rename(squat, hidden)

    def registered() -> None:  # the victim's own registry, holding the entry of a root it does not descend from
        if os.path.exists("/tmp/mlacheck-2001"):
            return
        os.makedirs("/tmp/mlacheck-2001/runs", mode=0o700)
        Path("/tmp/mlacheck-2001/runs/1-1").write_text("/nowhere")
        for path in ("/tmp/mlacheck-2001", "/tmp/mlacheck-2001/runs", "/tmp/mlacheck-2001/runs/1-1"):
            os.chown(path, VICTIM, VICTIM)

    def unregistered() -> None:
        subprocess.run(["rm", "-rf", "/tmp/mlacheck-2001"], check=True)

    for name, package in (("now", str(ROOT)), (before, before)):
        if package is None:
            continue
        if name == "now":
            without_pth, with_pth = abba(turns, without, lambda: pth(pth_text), package)
            print(f"1. no run: python -c pass {without_pth:.1f} ms without the .pth, {with_pth:.1f} ms with it")
        pth(pth_text if name == "now" else (Path(package) / "mlacheck-startup.pth").read_text())
        plain, squat_ms = abba(turns, free, squatted, package)
        print(f"2. [{name}] another user's 300 000-entry squat: {plain:.1f} ms without, {squat_ms:.1f} ms with it")
        free()
        plain, other = abba(turns, unregistered, registered, package)
        print(f"3. [{name}] another run of the user's registered: {plain:.1f} ms without, {other:.1f} ms with it")
        unregistered()


SQUAT = (
    "import os\nos.makedirs('/tmp/mlacheck-2001/runs')\n"
    "[os.chmod(p, 0o777) for p in ('/tmp/mlacheck-2001', '/tmp/mlacheck-2001/runs')]\n"
    "for n in range(300_000):\n    os.close(os.open(f'/tmp/mlacheck-2001/runs/{n}-{n}', os.O_CREAT | os.O_WRONLY, 0o644))\n"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before")
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.inside:
        inside(options.turns, options.before)
        return
    hidden = next(
        (
            str(p)
            for p in reversed(Path(os.path.realpath(sys.executable)).parents)
            if p != Path("/") and not p.stat().st_mode & 0o001
        ),
        None,
    )
    setup = ["set -e", "mount -t tmpfs -o mode=1777 tmpfs /tmp"]
    if hidden is not None:  # pyenv's /root: a private tmpfs holding only the interpreter's tree, passable by all
        inner = Path(os.path.realpath(sys.executable)).relative_to(hidden).parts[0]
        setup += [
            f"mkdir /tmp/.hidden && mount --bind {hidden} /tmp/.hidden",
            f"mount -t tmpfs -o mode=0755 tmpfs {hidden}",
            f"mkdir {hidden}/{inner} && mount --bind /tmp/.hidden/{inner} {hidden}/{inner}",
            "umount -l /tmp/.hidden && rmdir /tmp/.hidden",
        ]
    args = [sys.executable, __file__, "--inside", "--turns", str(options.turns)]
    args += ["--before", options.before] if options.before else []
    setup.append(shlex.join(args))
    subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", "\n".join(setup)], check=True)


if __name__ == "__main__":
    main()
