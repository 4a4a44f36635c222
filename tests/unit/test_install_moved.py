"""What capture put in place is checked again (`Patches.moved`): a rebound attribute and a module imported again are
each said once; the undo leaves what the program put there since."""

import sys
import types

from mlacheck.capture.install import Patches


def original(x):
    return x


def wrapper(x):
    return x


def test_a_rebound_attribute_is_said_once_and_the_programs_object_survives_the_undo():
    module = types.ModuleType("lib")
    module.forward = original
    patches = Patches("fam")
    patches.replace(module, "forward", wrapper)
    assert patches.moved() == [] and patches.holds(module, "forward")

    def mine(x):
        return x

    module.forward = mine
    [line] = patches.moved()
    assert line.startswith("lib.forward no longer holds mlacheck's wrapper")
    assert patches.moved() == []  # said once
    patches.undo(lambda where, action: action())
    assert module.forward is mine


def test_the_undo_puts_the_original_back_where_the_replacement_still_is():
    module = types.ModuleType("lib")
    module.forward = original
    patches = Patches("fam")
    patches.replace(module, "forward", wrapper)
    patches.undo(lambda where, action: action())
    assert module.forward is original


def test_a_module_imported_again_is_said(monkeypatch):
    patches = Patches("fam")
    json = patches.import_module("json")
    assert patches.moved() == []
    monkeypatch.setitem(sys.modules, "json", types.ModuleType("json"))
    [line] = patches.moved()
    assert line.startswith("json was imported again")
    patches.import_module("json")  # followed: the new module object is the one watched now
    monkeypatch.setitem(sys.modules, "json", json)
    assert len(patches.moved()) == 1  # and the original's return is a change again
