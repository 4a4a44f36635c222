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
