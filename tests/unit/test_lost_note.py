"""The note beside a trace (`sinks._Note`): made whole with the trace, written through its mapping, by its path where
the file was cut short under it (a write past a mapped file's end would kill the observed process)."""

import os

from mlacheck.sinks import NOTE_SIZE, JsonlSink


def test_the_note_is_made_with_the_trace_and_says_each_loss_at_once(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    note = tmp_path / "trace-1.jsonl.lost"
    assert note.read_bytes() == b"0 event(s) lost".ljust(NOTE_SIZE - 1) + b"\n"
    os.close(sink._fd)  # as the program's os.closerange does: the trace is opened again by its path ...
    (tmp_path / "trace-1.jsonl").unlink()
    (tmp_path / "trace-1.jsonl").mkdir()  # ... where it cannot be
    sink.write({"type": "context", "values": {}})
    assert note.read_bytes() == b"1 event(s) lost (EBADF x1)".ljust(NOTE_SIZE - 1) + b"\n"  # (through the mapping)
    sink.close()
    assert note.exists(), "a note that counts a loss stays"


def test_a_note_cut_short_under_the_process_is_written_by_its_path(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    note = tmp_path / "trace-1.jsonl.lost"
    os.truncate(note, 0)  # (through the mapping, the next write would end the process with SIGBUS)
    os.close(sink._fd)
    (tmp_path / "trace-1.jsonl").unlink()
    (tmp_path / "trace-1.jsonl").mkdir()  # the trace cannot be opened again
    sink.write({"type": "context", "values": {}})
    assert note.read_text() == "1 event(s) lost (EBADF x1)\n"
    sink.close()


def test_a_clean_close_takes_the_note_away(tmp_path):
    sink = JsonlSink(tmp_path / "trace-1.jsonl")
    sink.write({"type": "context", "values": {}})
    sink.close()
    assert not (tmp_path / "trace-1.jsonl.lost").exists()
