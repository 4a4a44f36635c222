"""Two local users (redteam section 2): a victim (uid 2001) runs mlacheck while an attacker (uid 2002) prepares
/tmp. Each scenario runs in a private mount namespace (`unshare -m`, a private tmpfs /tmp) with the users switched by
`setpriv`; it needs root (CI runs as root) and is skipped where that is not possible. Each asserts that no code of
the attacker's runs as the victim, no file of the victim's is written, and the run refuses, or ends INCOMPLETE, with
a line that says why."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.security.conftest import ROOT, SYNTHETIC

VICTIM, ATTACKER = 2001, 2002
EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pwned-so-%d-%d", getuid(), getpid());
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}
"""
EVIL_PY = "import os\nopen(f'/tmp/pwned-py-{os.getuid()}-{os.getpid()}', 'w').close()\nclass Evil:\n    pass\n"
PROGRAM = (
    "import subprocess, sys\nfrom tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1)\n"
    "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.3)'], check=True)\n"
)
CLEARED_WORKER = (
    "import os, subprocess, sys\nfrom tests.fixtures import synthetic_kernels as k\n"
    "k.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1)\n"
    "env = {'PATH': os.environ['PATH'], 'PYTHONPATH': os.environ['PYTHONPATH']}\n"
    "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.5)'], env=env, check=True)\n"
)


def _hidden_prefix() -> str | None:
    """The first folder on the interpreter's path that other users cannot enter (pyenv's /root), if any."""
    path = Path(os.path.realpath(sys.executable))
    for parent in reversed(path.parents):
        if parent != Path("/") and not parent.stat().st_mode & stat.S_IXOTH:
            return str(parent)
    return None


def _setup() -> str:
    """Root's part of the scenario, in the private namespace: a private /tmp, and the interpreter's hidden folder
    (pyenv's /root) made passable for the two users, by a private tmpfs holding only the interpreter's tree."""
    lines = ["set -e", "mount -t tmpfs -o mode=1777 tmpfs /tmp"]
    hidden = _hidden_prefix()
    if hidden is not None:
        inner = Path(os.path.realpath(sys.executable)).relative_to(hidden).parts[0]
        lines += [
            f"mkdir /tmp/.hidden && mount --bind {hidden} /tmp/.hidden",
            f"mount -t tmpfs -o mode=0755 tmpfs {hidden}",
            f"mkdir {hidden}/{inner} && mount --bind /tmp/.hidden/{inner} {hidden}/{inner}",
            "umount -l /tmp/.hidden && rmdir /tmp/.hidden",
        ]
    for uid in (VICTIM, ATTACKER):
        lines.append(f"mkdir -m 0700 /tmp/home-{uid} && chown {uid}:{uid} /tmp/home-{uid}")
    lines += [
        f"mkdir -m 0700 /tmp/home-{VICTIM}/private && echo precious > /tmp/home-{VICTIM}/private/precious.txt",
        f"chown -R {VICTIM}:{VICTIM} /tmp/home-{VICTIM}/private",
        "set +e",
    ]
    return "\n".join(lines)


def as_user(uid: int, command: str, cwd: str | None = None, env: str = "") -> str:
    """A shell line running `command` as `uid`, with a clean environment."""
    where = cwd or f"/tmp/home-{uid}"
    variables = f"PATH={os.path.dirname(sys.executable)}:/usr/bin:/bin HOME=/tmp/home-{uid} PYTHONPATH={ROOT}"
    variables += f" PYTHONDONTWRITEBYTECODE=1 COLUMNS=200 {env}"
    inner = shlex.quote(f"cd {where} && {command}")
    return f"setpriv --reuid {uid} --regid {uid} --clear-groups env -i {variables} sh -c {inner}"


def scenario(tmp_path: Path, script: str) -> str:
    """Run the scenario (bash, as root) in a private mount namespace; its output (stdout and stderr)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("two users need root, unshare(1) and setpriv(1) (CI runs as root)")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    check = as_user(VICTIM, f"{sys.executable} -c 'import mlacheck, tests.fixtures.synthetic_kernels'")
    full = f"exec 2>&1\n{_setup()}\n{check} || {{ echo 'SKIP: the victim cannot run this interpreter'; exit 0; }}\n"
    full += f"{script}\necho '== pwned:'; ls /tmp | grep pwned; echo '== precious:'\n"
    full += "cat /tmp/home-2001/private/precious.txt; echo '== private:'; ls -A /tmp/home-2001/private; echo '== end'\n"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", full],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    if "SKIP: the victim cannot run this interpreter" in output:
        pytest.skip("the other uid cannot run this interpreter here")
    return output


def assert_victim_unharmed(output: str) -> None:
    """No code of the attacker's ran (as anyone), and the victim's private folder holds only its own file."""
    pwned = output.split("== pwned:")[1].split("== precious:")[0].strip()
    assert pwned == "", f"attacker code ran: {pwned}\n{output[-4000:]}"
    assert output.split("== precious:")[1].split("== private:")[0].strip() == "precious", output[-4000:]
    assert output.split("== private:")[1].split("== end")[0].strip() == "precious.txt", output[-4000:]


def attacker_kit() -> str:
    """The attacker's tools in /tmp/attacker: evil.so (where a C compiler is), attacker_mod.py, and a capture.json
    writer that asks for LD_PRELOAD, PYTHONPATH and a watcher of its own."""
    config = {
        "families": [],
        "environment": {"LD_PRELOAD": "/tmp/attacker/evil.so", "PYTHONPATH": "/tmp/attacker", "BASH_ENV": "/x"},
        "watchers": [{"module": "json", "capture": "attacker_mod:Evil", "rule": {}}],
    }
    return "\n".join(
        [
            as_user(ATTACKER, "mkdir -p /tmp/attacker && chmod 755 /tmp/attacker"),
            f"cat > /tmp/attacker/evil.c <<'EOF'\n{EVIL_C}\nEOF",
            f"cat > /tmp/attacker/attacker_mod.py <<'EOF'\n{EVIL_PY}EOF",
            f"cat > /tmp/attacker/capture.json <<'EOF'\n{__import__('json').dumps(config)}\nEOF",
            "chown -R 2002:2002 /tmp/attacker && chmod 644 /tmp/attacker/*",
            as_user(ATTACKER, "gcc -shared -fPIC -o /tmp/attacker/evil.so /tmp/attacker/evil.c 2>/dev/null || true"),
        ]
    )


def victim_files() -> str:
    return "\n".join(
        [
            f"cat > /tmp/home-2001/prog.py <<'EOF'\n{PROGRAM}EOF",
            f"cat > /tmp/home-2001/cleared.py <<'EOF'\n{CLEARED_WORKER}EOF",
            "chown 2001:2001 /tmp/home-2001/*.py",
        ]
    )


def mlacheck_run(options: str, program: str = "prog.py", cwd: str | None = None) -> str:
    command = f"{sys.executable} -m mlacheck run -q --rules {SYNTHETIC} {options} -- {sys.executable} /tmp/home-2001/{program}"
    return as_user(VICTIM, f"{command}; echo EXIT $?", cwd)


def test_a_run_folder_made_by_another_user_is_refused(tmp_path):
    """B1: the attacker pre-makes the victim's --run-dir (0777, empty), to rewrite capture.json once it appears."""
    script = "\n".join(
        [
            attacker_kit(),
            victim_files(),
            as_user(ATTACKER, "mkdir -p /tmp/shared/job1 && chmod 777 /tmp/shared /tmp/shared/job1"),
            mlacheck_run("--run-dir /tmp/shared/job1"),
        ]
    )
    output = scenario(tmp_path, script)
    assert "EXIT 2" in output, output[-4000:]
    assert "--run-dir /tmp/shared/job1: /tmp/shared/job1 belongs to uid 2002" in output, output[-4000:]
    assert_victim_unharmed(output)


SWAP = """
import os, shutil, sys, time
deadline = time.time() + 60
while time.time() < deadline:
    try:
        if os.stat("/tmp/shared/job1").st_uid == 2001:
            os.rename("/tmp/shared/job1", "/tmp/shared/stolen")
            os.mkdir("/tmp/shared/job1")
            os.chmod("/tmp/shared/job1", 0o777)
            shutil.copy("/tmp/attacker/capture.json", "/tmp/shared/job1/capture.json")
            os.symlink("/tmp/home-2001/private/precious.txt", "/tmp/shared/job1/meta.json")
            os.symlink("/tmp/home-2001/private/precious.txt", "/tmp/shared/job1/processes.json")
            print("attacker: swapped the run folder", flush=True)
            break
    except OSError:
        pass
    time.sleep(0.001)
"""


def test_a_run_folder_swapped_under_a_shared_parent_is_never_joined_nor_written_through(tmp_path):
    """B1 with a race: the attacker owns the parent (0777, not sticky) and swaps the victim's new folder for one of
    its own, with capture.json asking for LD_PRELOAD and links to the victim's private file."""
    script = "\n".join(
        [
            attacker_kit(),
            victim_files(),
            f"cat > /tmp/attacker/swap.py <<'EOF'\n{SWAP}EOF",
            "chown 2002:2002 /tmp/attacker/swap.py",
            as_user(ATTACKER, "mkdir -p /tmp/shared && chmod 777 /tmp/shared"),
            as_user(ATTACKER, f"{sys.executable} /tmp/attacker/swap.py") + " &",
            "sleep 1",
            mlacheck_run("--run-dir /tmp/shared/job1"),
            "wait",
        ]
    )
    output = scenario(tmp_path, script)
    assert_victim_unharmed(output)
    if "attacker: swapped" in output or "belongs to uid 2002" in output:  # refused, or incomplete, saying why
        assert "EXIT 2" in output and "mlacheck: error: " in output or "incomplete: " in output, output[-4000:]
    else:  # too late: the victim's run was its own to the end
        assert "EXIT 0" in output, output[-4000:]


def test_a_default_run_folder_parent_made_by_another_user_is_refused(tmp_path):
    """B2: the attacker pre-makes mlacheck-runs (0777) in a shared working folder the victim runs mlacheck in."""
    script = "\n".join(
        [
            attacker_kit(),
            victim_files(),
            as_user(
                ATTACKER,
                "mkdir -p /tmp/shared/team/mlacheck-runs && chmod 777 /tmp/shared/team /tmp/shared/team/mlacheck-runs",
            ),
            mlacheck_run("", cwd="/tmp/shared/team"),
        ]
    )
    output = scenario(tmp_path, script)
    assert "EXIT 2" in output and "mlacheck-runs belongs to uid 2002" in output, output[-4000:]
    assert_victim_unharmed(output)


def test_a_run_folder_of_another_user_named_in_mlacheck_run_dir_is_not_joined(tmp_path):
    """MLACHECK_RUN_DIR left pointing at a folder the attacker made, whose capture.json asks for LD_PRELOAD,
    PYTHONPATH and a watcher module the attacker put in the victim's working folder."""
    script = "\n".join(
        [
            attacker_kit(),
            as_user(ATTACKER, "mkdir -p /tmp/shared/evil && cp /tmp/attacker/capture.json /tmp/shared/evil/"),
            as_user(ATTACKER, "cp /tmp/attacker/attacker_mod.py /tmp/shared/ && chmod 755 /tmp/shared"),
            as_user(
                VICTIM,
                f"{sys.executable} -c \"import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])\"; "
                "echo EXIT $?",
                "/tmp/shared",
                env="MLACHECK_RUN_DIR=/tmp/shared/evil",
            ),
            "echo '== left in the folder:'; ls -A /tmp/shared/evil",
        ]
    )
    output = scenario(tmp_path, script)
    assert "EXIT 0" in output, output[-4000:]
    assert "run folder /tmp/shared/evil belongs to uid 2002" in output, output[-4000:]
    assert output.split("== left in the folder:")[1].split("== pwned:")[0].split() == ["capture.json"]
    assert_victim_unharmed(output)


SQUAT = """
import os
os.makedirs("/tmp/mlacheck-2001/runs")
os.chmod("/tmp/mlacheck-2001", 0o777)
os.chmod("/tmp/mlacheck-2001/runs", 0o777)
for n in range(300_000):
    os.close(os.open(f"/tmp/mlacheck-2001/runs/{n}-{n}", os.O_CREAT | os.O_WRONLY, 0o644))
"""


def test_a_squatted_registry_is_never_listed_and_the_run_says_it_is_unregistered(tmp_path):
    """A1, A2: the attacker makes /tmp/mlacheck-2001/runs with 300 000 entries. The victim's Python processes do not
    list it, nor import mlacheck; the victim's run says it is not registered, and its worker started with a cleared
    environment is named as unobserved (INCOMPLETE)."""
    if shutil.which("strace") is None:
        pytest.skip("no strace(1) here to see what the start path reads")
    script = "\n".join(
        [
            victim_files(),
            f"cat > /tmp/squat.py <<'EOF'\n{SQUAT}EOF",
            as_user(ATTACKER, f"{sys.executable} /tmp/squat.py"),
            "echo '== syscalls:'",
            as_user(
                VICTIM,
                "strace -f -e trace=openat,getdents64 "
                f"{sys.executable} -c \"import sys; print('imported', sorted(m for m in sys.modules if m.split('.')[0] == 'mlacheck'))\" 2>&1 "
                "| grep -E 'mlacheck-2001|imported'",
            ),
            "echo '== run:'",
            mlacheck_run("--run-dir /tmp/home-2001/run", program="cleared.py"),
        ]
    )
    output = scenario(tmp_path, script)
    syscalls = output.split("== syscalls:")[1].split("== run:")[0]
    assert "imported []" in syscalls and "mlacheck-2001" not in syscalls, syscalls
    run = output.split("== run:")[1]
    assert "the run is not registered" in run and "belongs to uid 2002" in run, run[-4000:]
    assert "EXIT 2" in run and "ran unobserved" in run, run[-4000:]
    assert_victim_unharmed(output)


def test_a_registry_folder_linked_to_a_folder_of_the_victims_is_not_followed(tmp_path):
    """A3: /tmp/mlacheck-2001 is the attacker's link to the victim's private folder: nothing is made inside it."""
    script = "\n".join(
        [
            victim_files(),
            as_user(ATTACKER, "ln -s /tmp/home-2001/private /tmp/mlacheck-2001"),
            mlacheck_run("--run-dir /tmp/home-2001/run"),
        ]
    )
    output = scenario(tmp_path, script)
    assert "/tmp/mlacheck-2001 is a symbolic link" in output, output[-4000:]
    assert_victim_unharmed(output)


def test_the_scenarios_run_here():
    """The namespace helper itself: skipped where two users cannot be made, else a victim can run Python."""
    output = scenario(Path("/"), as_user(VICTIM, f"{sys.executable} -c 'import os; print(\"uid\", os.getuid())'"))
    assert "uid 2001" in output and textwrap.dedent(output)
