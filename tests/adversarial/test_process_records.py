"""Records that cannot be lost in silence: a trace descriptor that the program closes or reuses, a full disk and a
file-size limit each leave a run that names what it lost (INCOMPLETE) or still holds the serving-path compile
(FAIL); the program's own files hold only its own data."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.adversarial.conftest import WARM, assert_not_pass, observe, observe_wrapped, program

CLOSE_ALL = """
import os
os.closerange(3, 65536)  # as daemonizing code does (python-daemon's DaemonContext)
files = [open(os.path.join({out!r}, f"own-{{i}}.log"), "w") for i in range(8)]
for file in files:
    file.write("program data\\n")
    file.flush()
k.dispatch(1, "bf16", True)  # a serving-path compile
for file in files[:-1]:
    file.write("more\\n")
    file.close()
files[-1].write("left open, flushed at exit\\n")  # the interpreter flushes it at its end
"""


def test_a_program_that_closes_every_descriptor_keeps_its_files_and_the_compile_is_not_lost(tmp_path):
    out = tmp_path / "own"
    out.mkdir()
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM + CLOSE_ALL.format(out=str(out))))
    for index in range(8):
        text = (out / f"own-{index}.log").read_text()
        expected = "program data\n" + ("more\n" if index < 7 else "left open, flushed at exit\n")
        assert text == expected, f"own-{index}.log holds {text!r}"
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert_not_pass(result)
    if result.report["verdict"] == "fail":
        [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
        assert finding["key"] == {"dtype": "bf16", "causal": True}


CLOSED_FOR_GOOD = """
import os, resource
os.closerange(3, 65536)  # as daemonizing code does, then one way past which no file can be opened again
{then}
k.dispatch(1, "bf16", True)  # a serving-path compile
"""
FOR_GOOD = {  # how a daemonizing server leaves its trace out of reach (python-daemon's DaemonContext(uid=, chroot=))
    "no descriptor left": "resource.setrlimit(resource.RLIMIT_NOFILE, (3, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))",
    "another user": "os.setgroups([]); os.setgid(65534); os.setuid(65534)",
    "another root": "os.chroot({jail!r}); os.chdir('/')",
}


@pytest.mark.parametrize("how", FOR_GOOD)
def test_a_program_that_leaves_its_trace_out_of_reach_loses_no_event_in_silence(tmp_path, how):
    if how != "no descriptor left" and os.geteuid() != 0:
        pytest.skip("changing user or root needs root")
    jail = tmp_path / "jail"
    jail.mkdir()
    text = CLOSED_FOR_GOOD.format(then=FOR_GOOD[how].format(jail=str(jail)))
    result = observe(tmp_path, sys.executable, program(tmp_path, WARM + text))
    assert_not_pass(result)
    if result.report["verdict"] == "incomplete":
        lost = [reason for reason in result.report["incomplete"] if "were never written" in reason]
        assert lost and "EBADF" in lost[0], result.report["incomplete"]


def private_mounts() -> None:
    """Skip unless this process may make a private mount namespace (root, or user namespaces)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here: a small disk cannot be mounted for this test")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")


def observe_on_small_disk(tmp_path, text: str, size: str = "1m"):
    """`observe` with the run folder on a tmpfs of `size`, mounted in a private mount namespace (copied out after)."""
    private_mounts()
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f'mount -t tmpfs -o size={size},mode=0700 tmpfs "$DISK" && "$@"; code=$?; cp -r "$DISK/run" "$COPY" 2>/dev/null;'
        " exit $code"
    )
    wrapper = ("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh")
    env = {"DISK": str(disk), "COPY": str(tmp_path / "run-copy"), "MLACHECK_DISK": str(disk)}
    return observe_wrapped(tmp_path, wrapper, [sys.executable, program(tmp_path, text)], disk / "run", env)


FILL_THE_DISK = """
import glob, json, os
trace = glob.glob(os.path.join(os.environ["MLACHECK_DISK"], "run", "trace-*.jsonl"))[0]
# leave {room} bytes in the trace's last page: 0, the next event needs a new page and gets none; a few, it is cut
pad = (-os.path.getsize(trace) - {room}) % 4096
pad += 4096 if pad < 64 else 0
with open(trace, "a") as own:  # a context event, padded with blanks
    own.write(json.dumps({{"type": "context", "values": {{}}}}).ljust(pad - 1) + "\\n")
assert -os.path.getsize(trace) % 4096 == {room}, os.path.getsize(trace)
filler = os.path.join(os.environ["MLACHECK_DISK"], "filler")
with open(filler, "wb", buffering=0) as fill:
    try:
        while fill.write(b"x" * 4096):
            pass
    except OSError:
        pass
before = os.path.getsize(trace)
k.dispatch(1, "bf16", True)  # a serving-path compile, while the disk is full
print("trace grew by", os.path.getsize(trace) - before, flush=True)
os.unlink(filler)  # room again: the process's last events are written
"""


@pytest.mark.parametrize("room", [0, 100], ids=["full at a page boundary", "full mid-page"])
def test_a_serving_compile_written_to_a_full_disk_is_never_lost_in_silence(tmp_path, room):
    result = observe_on_small_disk(tmp_path, WARM + FILL_THE_DISK.format(room=room))
    assert_not_pass(result, "incomplete")
    lost = [reason for reason in result.report["incomplete"] if "were never written" in reason]
    assert lost and "ENOSPC" in lost[0], result.report["incomplete"]


FULL_TO_THE_END = """
import os, shutil, sys
disk = os.environ["MLACHECK_DISK"]
child = os.fork()
if child == 0:  # the child fills the disk, compiles on the serving path and ends with the disk still full
    import json
    trace = os.path.join(disk, "run", f"trace-{{os.getpid()}}.jsonl")
    pad = -os.path.getsize(trace) % 4096  # its last page filled: the next event needs a page it does not get
    pad += 4096 if pad < 64 else 0
    with open(trace, "a") as own:
        own.write(json.dumps({{"type": "context", "values": {{}}}}).ljust(pad - 1) + "\\n")
    fill = open(os.path.join(disk, "filler"), "wb", buffering=0)
    os.mkdir(os.path.join(disk, "hogs"))
    try:  # every inode taken ({hog} files): a note made only now could not be made at all
        for n in range({hog}):
            open(os.path.join(disk, "hogs", str(n)), "w").close()
    except OSError:
        pass
    try:
        while fill.write(b"x" * 4096):
            pass
    except OSError:
        pass
    k.dispatch(1, "bf16", True)
    sys.exit(0)
os.waitpid(child, 0)
os.unlink(os.path.join(disk, "filler"))  # room again for the parent and the supervisor
shutil.rmtree(os.path.join(disk, "hogs"))
"""


def test_a_process_that_ends_with_the_disk_still_full_loses_no_event_in_silence(tmp_path):
    result = observe_on_small_disk(tmp_path, WARM + FULL_TO_THE_END.format(hog=0))
    assert_not_pass(result, "incomplete")
    lost = [reason for reason in result.report["incomplete"] if "were never written" in reason]
    assert lost, result.report["incomplete"]


def test_a_process_that_loses_events_with_no_inode_left_loses_none_in_silence(tmp_path):
    """No inode left when the trace refuses an event: the note beside the trace was made when the trace was, and is
    rewritten in place."""
    result = observe_on_small_disk(tmp_path, WARM + FULL_TO_THE_END.format(hog=100_000), size="1m,nr_inodes=400")
    assert_not_pass(result, "incomplete")
    lost = [reason for reason in result.report["incomplete"] if "were never written" in reason]
    assert lost and "ENOSPC" in lost[0], result.report["incomplete"]


def test_a_file_size_limit_loses_no_event_in_silence(tmp_path):
    text = WARM + "for n in range(200):\n    k.dispatch(1, f'dtype{n}', True)\n"
    limited = ["sh", "-c", 'ulimit -f 16 && exec "$@"', "sh"]  # 16 blocks of 512 bytes: 8 KiB a file
    result = observe_wrapped(tmp_path, (), [*limited, sys.executable, program(tmp_path, text)], tmp_path / "run", {})
    assert_not_pass(result)
    lost = [reason for reason in result.report["incomplete"] if "were never written" in reason]
    assert lost and "EFBIG" in lost[0], result.report["incomplete"]


def test_a_run_folder_deleted_while_the_program_runs_ends_in_a_report_that_says_so(tmp_path):
    text = WARM + (
        "import os, shutil\nfolder = os.environ['MLACHECK_RUN_DIR']\nos.chdir('/')\nshutil.rmtree(folder)\n"
        "k.dispatch(1, 'bf16', True)\n"
    )
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "incomplete")
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "the run folder vanished while the program ran" in result.report["incomplete"][0]
    assert "vanished" in result.stdout and result.code == 2


def test_a_disk_still_full_at_the_end_ends_in_a_report_that_says_so(tmp_path):
    fill = (
        "import os\nwith open(os.path.join(os.environ['MLACHECK_DISK'], 'filler'), 'wb', buffering=0) as fill:\n"
        "    try:\n        while fill.write(b'x' * 4096):\n            pass\n    except OSError:\n        pass\n"
    )
    result = observe_on_small_disk(tmp_path, WARM + fill)
    assert_not_pass(result, "incomplete")
    assert "internal error" not in result.stderr, result.stderr
    full = [reason for reason in result.report["incomplete"] if "No space left on device" in reason]
    assert full and ("processes.json" in full[0] or "meta.json" in full[0]), result.report["incomplete"]
