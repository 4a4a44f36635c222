"""The hot path's launcher and lookup dicts, compiled and pure Python: the same counts, flushes and answers;
and the capture's own tests pass on the pure-Python hot path too."""

import gc
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import weakref
from pathlib import Path

import pytest

from mlacheck.capture import hotpath
from mlacheck.capture.hotpath import count_of
from tests.unit.hotpaths import COMPILED, HOTPATHS, PYTHON, Field

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=HOTPATHS, ids=lambda hot: hot.__name__)
def hot(request):
    return request.param


def launcher_of(hot):
    return hot.launcher if hot is PYTHON else hot.Launcher


def counter_of(hot):
    return hot.counter if hot is PYTHON else hot.Counter


class Capture:
    """What the lookup dicts call on their capture: `maybe_flush`."""

    def __init__(self):
        self.flushes = 0

    def maybe_flush(self):
        self.flushes += 1


def lookup_dict(hot, lookup, entries, fast, ticks):
    base = hot.GetitemDict if lookup == "getitem" else hot.ContainsDict

    class Recording(base):
        __slots__ = ()

        def _missed(self, key, frame):
            self.misses.append((key, frame.f_code.co_name))
            return dict.__getitem__(self, key) if lookup == "getitem" else dict.__contains__(self, key)

    Recording.misses = []
    cache = Recording(entries)
    cache._capture, cache._fast, cache._ticks = Capture(), fast_table(hot, fast), ticks
    return cache


def fast_table(hot, entries):
    table = hot.FastTable()
    for key, entry in entries.items():
        table[key] = entry
    return table


def skip_without_a_compiler() -> None:
    if os.environ.get("MLACHECK_HOTPATH") == "python":
        pytest.skip("MLACHECK_HOTPATH=python: the pure-Python hot path is the one, by choice")
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None or not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        pytest.skip(f"no C compiler ({compiler}) or Python headers here: the pure-Python hot path is the one")


def test_the_compiled_hot_path_is_built_where_a_compiler_is():
    """pip builds `_hotpath` wherever the interpreter's C compiler is installed; a build that silently left it
    out would make every dispatch pay the pure-Python frames."""
    skip_without_a_compiler()
    assert COMPILED is not None and hotpath.IMPLEMENTATION == "c"
    assert COMPILED.FLUSH_EVERY == PYTHON.FLUSH_EVERY


def test_the_end_watcher_is_built_where_a_compiler_and_glibc_are():
    """`mlacheck.program._ending` (how a worker ends: program/ending.py) is built beside the hot path; a build that
    silently left it out would tell no worker's crash, and its tests would skip."""
    skip_without_a_compiler()
    if not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("no glibc here (its on_exit): the end watcher is not built")
    from mlacheck.program import ending

    assert ending._ending is not None


def test_the_checkout_that_subprocess_tests_run_has_the_compiled_hot_path_where_a_compiler_is():
    """The CLI that tests start in subprocesses imports this checkout's mlacheck (PYTHONPATH): built in place by the
    editable install the README's test command makes. A plain `pip install .` leaves the checkout without it, and every
    such test then ran the pure-Python hot path unsaid (this pytest process imports the installed package)."""
    skip_without_a_compiler()
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", "import mlacheck.capture.hotpath as h, mlacheck; print(h.IMPLEMENTATION, mlacheck.__file__)"],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    implementation, where = done.stdout.split()
    assert Path(where).is_relative_to(root) and implementation == "c", (
        f"{where} runs the {implementation} hot path: build it in the checkout with pip install -e '.[test,fa4]'"
    )


def test_a_counter_counts_from_its_start_and_reads_without_stepping(hot):
    counter = counter_of(hot)(5)
    assert [next(counter) for _ in range(3)] == [5, 6, 7] and count_of(counter) == count_of(counter) == 8


def test_the_launcher_counts_flushes_and_forwards(hot):
    counter, ticks, flushes, seen = counter_of(hot)(), counter_of(hot)(), [], []

    def kernel(*args, **kwargs):
        seen.append((args, kwargs))
        return len(seen)

    launch = launcher_of(hot)(counter, kernel, ticks, lambda: flushes.append(count_of(counter)))
    for number in range(1, 2049):
        assert launch(number, stream=None) == number
    assert count_of(counter) == count_of(ticks) == 2048 and flushes == [1024, 2048]
    assert seen[0] == ((1,), {"stream": None}) and seen[-1] == ((2048,), {"stream": None})


def test_a_launch_that_raises_is_still_counted(hot):
    counter = counter_of(hot)()

    def kernel():
        raise RuntimeError("cudaErrorNoKernelImageForDevice")

    launch = launcher_of(hot)(counter, kernel, counter_of(hot)(), lambda: None)
    with pytest.raises(RuntimeError, match="NoKernelImage"):
        launch()
    assert count_of(counter) == 1


@pytest.mark.parametrize("lookup", ["getitem", "contains"])
def test_the_lookup_dict_serves_the_fast_table_and_misses_to_python(hot, lookup):
    counter, ticks = counter_of(hot)(), counter_of(hot)()
    cache = lookup_dict(hot, lookup, {"a": 1, "b": 2}, {"a": (counter, "launcher of a")}, ticks)

    def library_dispatch(key):
        return cache[key] if lookup == "getitem" else key in cache

    hit, missed = ("launcher of a", 2) if lookup == "getitem" else (True, True)
    for _ in range(2048):
        assert library_dispatch("a") == hit
    assert library_dispatch("b") == missed
    assert count_of(counter) == count_of(ticks) == 2048 and cache._capture.flushes == 2
    assert cache.misses == [("b", "library_dispatch")]  # the slow path gets the library's frame
    if lookup == "getitem":
        with pytest.raises(KeyError):
            library_dispatch("absent")
    else:
        assert library_dispatch("absent") is False
    assert dict(cache) == {"a": 1, "b": 2} and len(cache) == 2 and cache.get("b") == 2  # a dict otherwise


def test_a_lookup_dict_keeps_the_other_operation_a_dicts(hot):
    """A getitem family's `in` and a contains family's `[]` are not lookups: neither counts."""
    counter, ticks = counter_of(hot)(), counter_of(hot)()
    getitem = lookup_dict(hot, "getitem", {"a": 1}, {"a": (counter, "x")}, ticks)
    contains = lookup_dict(hot, "contains", {"a": 1}, {"a": (counter, "x")}, ticks)
    assert "a" in getitem and contains["a"] == 1 and count_of(counter) == count_of(ticks) == 0


def test_a_key_served_lately_is_found_without_hashing_it_and_each_counts_to_its_own_variant(hot):
    """The compiled table remembers the keys it served last (a new tuple of the same field objects, as the library
    builds each call, is found by comparing fields); more keys than it remembers take turns; every lookup counts
    to its own variant either way."""
    fields = [Field(f"v{number}") for number in range(6)]
    counters = [counter_of(hot)() for _ in fields]
    ticks = counter_of(hot)()
    cache = lookup_dict(
        hot,
        "getitem",
        {},
        {("fp8", field, True): (counter, field.name) for field, counter in zip(fields, counters)},
        ticks,
    )
    Field.hashed = 0
    for _ in range(100):
        assert cache[("fp8", fields[0], True)] == "v0"
    assert Field.hashed == (1 if hot is COMPILED else 100)
    for _ in range(10):
        for field in fields:
            assert cache[("fp8", field, True)] == field.name
    assert [count_of(counter) for counter in counters] == [110, 10, 10, 10, 10, 10] and count_of(ticks) == 160
    assert cache[("fp8", Field("v1"), True)] == "v1"  # an equal key of other objects is found by hashing
    assert count_of(counters[1]) == 11 and cache.misses == []


@pytest.mark.parametrize("change", ["pop", "clear", "set", "delete"])
def test_a_change_to_the_fast_table_forgets_the_keys_it_served(hot, change):
    """A key retired from the table (a phase change, a mutation of the cache) must reach the slow path on its next
    lookup, however lately it was served."""
    field, counter, ticks = Field("v0"), counter_of(hot)(), counter_of(hot)()
    cache = lookup_dict(hot, "getitem", {(field, 192): 1}, {(field, 192): (counter, "fast")}, ticks)
    assert cache[(field, 192)] == "fast"
    fast = cache._fast
    if change == "pop":
        assert fast.pop((field, 192))[1] == "fast" and fast.pop((field, 192), None) is None
    elif change == "clear":
        fast.clear()
    elif change == "set":
        fast[(field, 192)] = (counter, "renewed")
    else:
        del fast[(field, 192)]
    served = cache[(field, 192)]
    if change == "set":
        assert served == "renewed" and count_of(counter) == 2 and cache.misses == []
    else:
        assert served == 1 and count_of(counter) == 1 and len(cache.misses) == 1 and len(fast) == 0
        assert fast.get((field, 192)) is None and (field, 192) not in fast


def test_counts_are_exact_under_threads(hot):
    counter, ticks = counter_of(hot)(), counter_of(hot)()
    launch = launcher_of(hot)(counter, lambda: None, ticks, lambda: None)
    cache = lookup_dict(hot, "getitem", {"k": 1}, {"k": (counter, "x")}, ticks)

    def work():
        for _ in range(20_000):
            launch()
            cache["k"]

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert count_of(counter) == count_of(ticks) == 160_000


def test_cycles_through_the_hot_path_are_collected(hot):
    """The capture holds its wrappers and they hold the capture: the collector must see through them."""

    class Holder:
        pass

    holder = Holder()
    forwarder = hot.forwarder if hot is PYTHON else hot.Forwarder
    holder.wrapper = forwarder(lambda: None, counter_of(hot)(), counter_of(hot)(), lambda *args: holder)  # noqa: F821
    holder.launch = launcher_of(hot)(counter_of(hot)(), lambda: holder, counter_of(hot)(), lambda: None)  # noqa: F821
    holder.cache = lookup_dict(hot, "getitem", {"self": holder}, {}, counter_of(hot)())
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None


def test_the_capture_tests_pass_on_the_pure_python_hot_path():
    """The whole capture suite, run with MLACHECK_HOTPATH=python (the rest of the suite runs on the build's)."""
    if COMPILED is None:
        pytest.skip("this build has the pure-Python hot path only: the suite itself ran on it")
    env = {**os.environ, "MLACHECK_HOTPATH": "python"}
    picked = subprocess.run(
        [sys.executable, "-c", "from mlacheck.capture import hotpath; print(hotpath.IMPLEMENTATION)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert picked.stdout.strip() == "python"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/unit/test_capture_hooks.py",
            "tests/unit/test_dispatch_wrapper.py",
            "tests/unit/test_jit_dir.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]


def test_the_get_dict_serves_the_fast_table_and_misses_to_python(hot):
    """`cache.get(key, None)`, as Triton's JITFunction.run looks its kernel cache up: a key in the fast table is
    counted and served from it; any other goes to `_missed` with the caller's frame, None from it being a miss."""
    counter, ticks = counter_of(hot)(), counter_of(hot)()

    class Recording(hot.GetDict):
        __slots__ = ()
        misses = []

        def _missed(self, key, frame):
            self.misses.append((key, frame.f_code.co_name))
            return dict.get(self, key)

    cache = Recording({"a": 1, "b": 2})
    cache._capture, cache._fast, cache._ticks = Capture(), fast_table(hot, {"a": (counter, "kernel a")}), ticks

    def run(key):
        return cache.get(key, None)

    for _ in range(2048):
        assert run("a") == "kernel a"
    assert run("b") == 2 and run("absent") is None and cache.get("absent", "default") == "default"
    assert count_of(counter) == count_of(ticks) == 2048 and cache._capture.flushes == 2
    assert Recording.misses[:2] == [("b", "run"), ("absent", "run")]
    assert dict(cache) == {"a": 1, "b": 2} and cache["a"] == 1 and "b" in cache  # a dict otherwise
    with pytest.raises(TypeError):
        cache.get()
