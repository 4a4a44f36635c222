"""The scenario's hold on the warnings of the libraries it drives: counted as Python would have printed them, none
printed, and a filter a library sets while held kept (as CUTLASS's DSL sets one on first use)."""

import warnings

from mlacheck.scenario.library_warnings import LibraryWarnings


class LibraryNotice(UserWarning):
    pass


def library_call(n: int) -> None:
    warnings.warn("the same place and text", UserWarning, stacklevel=1)
    warnings.warn(f"text {n}", UserWarning, stacklevel=1)


def test_held_warnings_are_not_printed_and_counted_once_per_text_and_place(capsys):
    library = LibraryWarnings()
    for n in range(3):
        with library.held():
            library_call(n % 2)
    assert library.count == 3  # one place with one text, one place with two texts
    assert capsys.readouterr().err == ""


def test_a_filter_a_library_sets_while_held_stays_set():
    library = LibraryWarnings()
    with warnings.catch_warnings():  # this test's own filters go back as they were
        with library.held():
            warnings.filterwarnings("ignore", category=LibraryNotice)
        with library.held():
            warnings.warn("an ignored notice", LibraryNotice, stacklevel=1)
        assert ("ignore", None, LibraryNotice, None, 0) in warnings.filters
    assert library.count == 0


def test_shown_warnings_pass_through(recwarn):
    library = LibraryWarnings(shown=True)
    with library.held():
        library_call(0)
    assert len(recwarn) == 2 and library.count == 0
