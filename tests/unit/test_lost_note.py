"""The note beside a trace (`sinks._Note`): made whole with the trace, its first line a count written by its path, or
through its mapping where the path is out of reach; its last END_SLOT bytes how its process ended (`ends.end_of`), kept
with the count of an earlier process of the same pid."""

import os

from mlacheck.program.ends import end_of
from mlacheck.sinks import END_SLOT, NOTE_SIZE, JsonlSink

BLANK_END = b" " * (END_SLOT - 1) + b"\n"


def line(text: bytes) -> bytes:
    return text.ljust(NOTE_SIZE - END_SLOT - 1) + b"\n"


def test_the_note_is_made_with_the_trace_and_says_each_loss_at_once(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    note = tmp_path / "trace-1.jsonl.lost"
    assert note.read_bytes() == line(b"0 event(s) lost") + BLANK_END
    os.close(sink._fd)  # as the program's os.closerange does: the trace is opened again by its path ...
    (tmp_path / "trace-1.jsonl").unlink()
    (tmp_path / "trace-1.jsonl").mkdir()  # ... where it cannot be
    sink.write({"type": "context", "values": {}})
    assert note.read_bytes() == line(b"1 event(s) lost (EBADF x1)") + BLANK_END
    sink.close()
    assert note.exists(), "a note that counts a loss stays"


def test_a_note_out_of_reach_by_its_path_is_written_through_its_mapping(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    note = tmp_path / "trace-1.jsonl.lost"
    os.close(sink._fd)
    (tmp_path / "trace-1.jsonl").unlink()
    (tmp_path / "trace-1.jsonl").mkdir()
    kept = tmp_path / "kept.lost"
    os.rename(note, kept)  # the path now names nothing: as after a chroot
    note.mkdir()  # (nor can anything be made there)
    sink.write({"type": "context", "values": {}})
    assert kept.read_bytes() == line(b"1 event(s) lost (EBADF x1)") + BLANK_END
    sink.close()


def test_a_clean_close_takes_the_note_away_unless_a_watcher_of_the_end_does(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    sink.write({"type": "context", "values": {}})
    sink.close()
    assert not (tmp_path / "trace-1.jsonl.lost").exists()
    sink = JsonlSink(tmp_path / "trace-2.jsonl")
    sink.leave_note = True
    sink.close()
    assert (tmp_path / "trace-2.jsonl.lost").exists()


def test_a_reused_pid_keeps_what_the_earlier_process_said(tmp_path):
    note = tmp_path / "trace-1.jsonl.lost"
    end = b"signal 11 1796548644.25".ljust(END_SLOT - 1) + b"\n"
    note.write_bytes(line(b"2 event(s) lost (ENOSPC x2)") + end)  # what the earlier process of pid 1 left
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    assert note.read_bytes() == line(b"2 event(s) lost") + end
    assert end_of(note.read_text()) == ("signal", 11, "1796548644.25")
    sink.close()
    assert note.exists(), "what it says is kept"


def test_a_hostile_end_line_says_nothing():
    head = line(b"0 event(s) lost").decode()
    for said in ("exit \u00b2 1.5", "exit " + "9" * 5000 + " 1.5", "exit \u0661\u0662 1.5", "signal -3 1.5", "exit 3"):
        assert end_of(head + said + "\n") is None, said
    assert end_of(head + "exit 3 1.5\n") == ("exit", 3, "1.5")
