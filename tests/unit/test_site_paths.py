"""Where a report says a compile or a dispatch happened (`file:line`): the path as short as it is clear, relative to
site-packages, the working folder or an import root, whatever spelling of it the interpreter kept."""

import os
import sys

from mlacheck.capture.stack import short_path


def test_a_script_run_through_dotdots_is_named_from_its_import_root(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "elsewhere" / "deep")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "work"), *sys.path])
    spelled = os.path.join(os.getcwd(), "..", "..", "work", "my_server.py")  # `python ../../work/my_server.py`
    assert short_path(spelled) == "my_server.py"
    assert short_path("../../work/my_server.py") == "my_server.py"


def test_a_file_under_the_working_folder_or_site_packages_is_named_from_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert short_path(str(tmp_path / "pkg" / "kernels.py")) == os.path.join("pkg", "kernels.py")
    assert short_path("/usr/lib/python3/site-packages/triton/runtime/jit.py") == "triton/runtime/jit.py"


def _chain(modules):
    """A function in each module (outermost first), each file named after its module, each calling the next one in;
    the innermost calls its module's `read`: (the innermost module's globals, the outermost function)."""
    inner, scopes = None, []
    for number, module in enumerate(reversed(modules)):
        scope = {"__name__": module, "inner": inner, "read": None}
        call = "read()" if inner is None else "inner()"
        exec(compile(f"def f{number}():\n    return {call}\n", f"/src/{module.replace('.', '/')}.py", "exec"), scope)
        inner = scope[f"f{number}"]
        scopes.append(scope)
    return scopes[0], inner


def test_a_stack_read_skips_the_packages_named_and_their_modules_only(tmp_path, monkeypatch):
    """The site of a read is the first frame outside the skipped packages and mlacheck's instrumentation: a package
    itself and the modules under it are skipped, a module whose name only starts with the package's is not; the stack
    lists the frames outside them, innermost first, each by its site and qualified name."""
    from mlacheck.capture.stack import StackReader

    monkeypatch.chdir(tmp_path)
    innermost, outermost = _chain(["user.server", "tritonic", "triton", "triton.language.core", "mlacheck.capture.x"])
    reader = StackReader(frozenset(), (), ("triton",))
    innermost["read"] = lambda: reader.read(sys._getframe(1))
    where = outermost()
    assert where.site == "/src/tritonic.py:2"
    assert [line.split(" ")[1] for line in where.stack[:2]] == ["f3", "f4"]
    assert where.stack[0].startswith("/src/tritonic.py:2 ") and where.stack[1].startswith("/src/user/server.py:2 ")
    assert where.dispatch_depth is None and where.phase is None
