"""`mlacheck report` on a run folder someone else wrote into (redteam 2.5): each hostile folder ends in seconds,
under `ulimit -v`, with one line and exit 2, or with the run INCOMPLETE naming the line it could not read; never a
hang, a memory blow-up, an "internal error", or a PASS that dropped a serving-path compile."""

import json
import os

import pytest

from tests.security.conftest import SECONDS, assert_one_line_error, report

DEEP = "[" * 200_000 + "]" * 200_000


def events(run):
    return [json.loads(line) for line in (run / "trace-9.jsonl").read_text().splitlines()]


def rewrite(run, change) -> None:
    """Rewrite trace-9.jsonl, each event through `change` (which may return a list of lines to write instead)."""
    lines = []
    for event in events(run):
        changed = change(event)
        lines += changed if isinstance(changed, list) else [json.dumps(changed)]
    (run / "trace-9.jsonl").write_text("\n".join(lines) + "\n")


def assert_incomplete_naming(result, *needles: str) -> None:
    """An incomplete reason names the bad line, and the run does not pass (INCOMPLETE, or FAIL where the findings
    still read fail it); never PASS."""
    assert result.seconds < SECONDS, f"{result.seconds:.1f} s"
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.report is not None, result.stderr[-3000:]
    assert result.report["verdict"] in ("incomplete", "fail") and result.code in (1, 2), result.report["verdict"]
    assert any(all(needle in reason for needle in needles) for reason in result.report["incomplete"]), result.report[
        "incomplete"
    ]


@pytest.mark.parametrize("name", ["trace-10.jsonl", "meta.json", "processes.json", "unobserved-77.txt"])
def test_a_fifo_in_the_folder_is_refused_not_waited_on(copy_of, tmp_path, name):
    (copy_of / name).unlink(missing_ok=True)
    os.mkfifo(copy_of / name)
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), name, "a FIFO")


def test_a_trace_linked_to_dev_zero_is_refused(copy_of, tmp_path):
    (copy_of / "trace-10.jsonl").symlink_to("/dev/zero")
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), "trace-10.jsonl", "a symbolic link")


def test_a_meta_json_linked_out_of_the_folder_is_refused(copy_of, tmp_path):
    outside = tmp_path / "elsewhere.json"
    (copy_of / "meta.json").rename(outside)
    (copy_of / "meta.json").symlink_to(outside)
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), "meta.json", "a symbolic link")


def test_a_folder_named_like_a_trace_is_refused(copy_of, tmp_path):
    (copy_of / "trace-11.jsonl").mkdir()
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), "trace-11.jsonl", "a directory")


def test_a_million_repeated_dispatch_events_are_read_in_seconds(copy_of, tmp_path):
    dispatch = next(line for line in (copy_of / "trace-9.jsonl").read_text().splitlines() if '"dispatch"' in line)
    with (copy_of / "trace-9.jsonl").open("a") as trace:
        trace.write((dispatch + "\n") * 1_000_000)
    result = report(str(copy_of), tmp_path=tmp_path)
    assert result.seconds < SECONDS and result.code == 1 and result.report["verdict"] == "fail", result.stderr[-2000:]


@pytest.mark.parametrize("version", [3, 4])
def test_a_hundred_thousand_compiles_awaiting_their_record_are_read_in_seconds(copy_of, tmp_path, version):
    """Compiles that returned and whose record never came, then records of other variants: each record was matched by a
    walk over every compile awaiting one (10^5 of them: hours). A trace of format 3 matches records that name no
    compile (`Awaited`); in format 4 each names one (here none that began: 10^5 strays)."""
    bracketed = [
        json.dumps(line)
        for n in range(100_000)
        for line in (
            {"type": "compile_start", "id": n, "phase": "warmup", "family": "synthetic", "vid": n, "key": {}, "t": 1.0},
            {"type": "compile_end", "id": n, "seconds": 0.1, "outcome": "returned", "t": 1.0},
        )
    ]
    recorded = [
        json.dumps(
            {"type": "compile", "family": "synthetic", "vid": 200_000 + n, "key": {"dtype": f"v{n}", "causal": True}}
            | {"phase": "warmup", "origin": "compile", "seconds": 0.1, "t": 2.0}
            | ({"start": 200_000 + n} if version == 4 else {})
        )
        for n in range(100_000)
    ]

    def change(event: dict) -> dict | list:
        if event["type"] == "family":
            return [json.dumps(event), *bracketed, *recorded]
        return {**event, "format_version": version} if event["type"] == "run" else event

    rewrite(copy_of, change)
    result = report(str(copy_of), "--allow-incomplete", tmp_path=tmp_path)
    assert result.seconds < SECONDS and result.report is not None, result.stderr[-3000:]
    assert result.report["verdict"] != "pass"


def test_a_hundred_thousand_measurements_are_read_in_seconds(copy_of, tmp_path):
    """Execute mode's measurements (`numerics`) of 10^5 variants: each was matched to its variant by a walk over every
    variant of its process (10^10 key comparisons: hours)."""
    keys = [{"dtype": f"v{n}", "causal": True} for n in range(100_000)]
    recorded = [
        json.dumps({"type": "compile", "family": "synthetic", "vid": 200_000 + n, "key": key, "phase": "warmup"})
        for n, key in enumerate(keys)
    ]
    measured = [
        json.dumps({"type": "numerics", "family": "synthetic", "key": key, "kernel": {"max_rel_err": 0.0}})
        for key in keys
    ]
    half = len(keys) // 2  # each measured after its compile, then all at once after theirs
    lines = (
        [line for pair in zip(recorded[:half], measured[:half]) for line in pair] + recorded[half:] + measured[half:]
    )
    rewrite(copy_of, lambda event: [json.dumps(event), *lines] if event["type"] == "family" else event)
    result = report(str(copy_of), "--allow-incomplete", tmp_path=tmp_path)
    assert result.seconds < SECONDS and result.report is not None, result.stderr[-3000:]
    assert result.report["verdict"] != "pass"  # (10^5 warm-up compiles never dispatched: dead warm-up)


def test_a_hundred_thousand_shapes_that_built_nothing_each_naming_a_foreign_entry_are_read_in_seconds(
    copy_of, tmp_path
):
    """After the serving-start mark, 10^5 shapes that built nothing, each naming one more entry found in the cache that no
    compile of the run made: the run-wide settlement (`analysis.borrowed`) looked at every entry found up to each
    record (10^10 lookups), and the never-entered reason compared every such variant with each (10^10 again)."""
    found = [
        json.dumps(
            {"type": "compile", "family": "synthetic", "vid": 200_000 + n, "key": {"dtype": f"v{n}", "causal": True}}
            | {"phase": "unknown", "origin": "unknown", "seconds": None, "t": 2.0, "foreign": [f"/cache/gemm.{n}"]}
        )
        for n in range(100_000)
    ]
    mark = json.dumps({"type": "serving_start", "how": "marked", "t": 1.9})
    rewrite(copy_of, lambda event: [mark, *found, json.dumps(event)] if event["type"] == "exit" else event)
    result = report(str(copy_of), "--allow-incomplete", tmp_path=tmp_path)
    assert result.seconds < SECONDS and result.report is not None, result.stderr[-3000:]
    assert result.report["verdict"] != "pass"
    assert any("no compile of this run made" in reason for reason in result.report["incomplete"])


def test_a_hundred_thousand_garbage_lines_are_named_in_seconds(copy_of, tmp_path):
    """Each is a line that could not be read, so the run is INCOMPLETE; the terminal lists the first of them and one
    line for the rest (it printed each twice, wrapped: minutes), the JSON report holds them all."""
    rewrite(copy_of, lambda event: [json.dumps(event), *["not json"] * 100_000] if event["type"] == "family" else event)
    result = report(str(copy_of), tmp_path=tmp_path)
    assert_incomplete_naming(result, "trace-9.jsonl:3 could not be read")
    assert len(result.report["bad_lines"]) == 100_000
    assert "… and 99,900 more (the JSON, SARIF and JUnit reports list every one)" in result.stdout


def test_a_million_variants_are_refused_in_one_line(copy_of, tmp_path):
    compile_event = next(e for e in events(copy_of) if e["type"] == "compile")
    with (copy_of / "trace-9.jsonl").open("a") as trace:
        for vid in range(1_000_000):
            trace.write(json.dumps({**compile_event, "vid": vid + 100, "key": {"dtype": f"x{vid}"}}) + "\n")
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), "more than 1000000 events")


def test_a_200_mb_line_is_a_bad_line_read_in_bounded_memory(copy_of, tmp_path):
    lines = (copy_of / "trace-9.jsonl").read_text().splitlines(keepends=True)
    with (copy_of / "trace-9.jsonl").open("w") as trace:
        trace.write(lines[0])
        for _ in range(200):
            trace.write("x" * (1 << 20))
        trace.write("\n" + "".join(lines[1:]))
    assert_incomplete_naming(report(str(copy_of), tmp_path=tmp_path), "trace-9.jsonl:2", "longer than")


def test_deep_nesting_in_a_trace_line_is_a_bad_line(copy_of, tmp_path):
    with (copy_of / "trace-9.jsonl").open("a") as trace:
        trace.write(DEEP + "\n")
    assert_incomplete_naming(report(str(copy_of), tmp_path=tmp_path), "trace-9.jsonl", "nested too deeply")


@pytest.mark.parametrize("name", ["meta.json", "processes.json"])
def test_deep_nesting_in_a_document_of_the_folder_is_one_line(copy_of, tmp_path, name):
    (copy_of / name).write_text(DEEP)
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), name, "nested too deeply")


def test_deep_nesting_in_a_saved_json_report_or_baseline_is_one_line(copy_of, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert_one_line_error(report(str(deep), tmp_path=tmp_path), "deep.json", "nested too deeply")
    assert_one_line_error(report(str(copy_of), "--baseline", str(deep), tmp_path=tmp_path), "--baseline", "deep.json")


def test_deep_nesting_in_a_saved_rule_file_is_one_line(copy_of, tmp_path):
    [rules] = list((copy_of / "rules").glob("*.toml"))
    rules.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), "nested too deeply")


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("meta.json", '"a string"', "not run metadata"),
        ("meta.json", "[1, 2]", "not run metadata"),
        ("meta.json", '{"command": 7, "exit_code": 0}', "'command'"),
        ("meta.json", '{"command": ["x"], "signal": "SIGNOPE"}', "'signal'"),
        ("processes.json", "[1, 2]", "not a process record"),
        ("processes.json", '{"processes": [{"pid": 1}]}', "'python'"),
    ],
)
def test_a_document_of_the_wrong_shape_is_one_line(copy_of, tmp_path, name, text, needle):
    (copy_of / name).write_text(text)
    assert_one_line_error(report(str(copy_of), tmp_path=tmp_path), name, needle)


SERVING = {"type": "compile", "phase": "serving"}


def spoil_the_serving_compile(**fields):
    def change(event):
        return {**event, **fields} if all(event.get(k) == v for k, v in SERVING.items()) else event

    return change


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"phase": "SERVING"}, "phase"),
        ({"key": ["bf16", True]}, "key"),
        ({"vid": "1"}, "vid"),
        ({"family": "synthetic2"}, "synthetic2"),
        ({"seconds": float("nan")}, "seconds is not a finite number"),
        ({"seconds": float("-inf")}, "seconds is not a finite number"),
        ({"stack": [["serve.py", 3], {"frame": 1}]}, "stack is not a list of text"),
        ({"spelling": ["bf16"]}, "spelling is not an object"),
        ({"key": {"dtype": {"bf16": 1}, "causal": True}}, "key holds an object"),
    ],
    ids=[
        "an unknown phase",
        "a key that is a list",
        "a vid that is text",
        "an unknown family",
        "NaN seconds",
        "-Infinity seconds",
        "a stack of lists",
        "a spelling that is a list",
        "a key that holds an object",
    ],
)
def test_a_serving_compile_of_the_wrong_shape_is_never_dropped_in_silence(copy_of, tmp_path, fields, needle):
    rewrite(copy_of, spoil_the_serving_compile(**fields))
    result = report(str(copy_of), tmp_path=tmp_path)
    assert_incomplete_naming(result, needle)


def test_a_serving_compile_at_a_site_of_half_a_surrogate_pair_is_reported_escaped(copy_of, tmp_path):
    """A path that is not UTF-8 (Python decodes its bytes to half surrogate pairs, JSON spells them `\\udcff`): the
    serving-path compile is read and reported, its site escaped in the terminal (printing it ended the report in an
    internal error)."""
    rewrite(copy_of, spoil_the_serving_compile(site="serve\udcff.py:3"))
    result = report(str(copy_of), tmp_path=tmp_path)
    assert result.code == 1 and "internal error" not in result.stderr, result.stderr[-3000:]
    assert result.report["verdict"] == "fail"
    assert [f["site"] for f in result.report["findings"] if f["code"] == "MLA001"] == ["serve\udcff.py:3"]
    assert "serve\\udcff.py:3" in result.stdout


def test_counts_of_the_wrong_types_are_a_bad_line(copy_of, tmp_path):
    def change(event):
        return {**event, "calls": {"dispatch": "many"}} if event["type"] == "counts" else event

    rewrite(copy_of, change)
    assert_incomplete_naming(report(str(copy_of), tmp_path=tmp_path), "trace-9.jsonl", "counts")


def test_a_format_2_body_labelled_format_1_is_never_read_as_warm_up(copy_of, tmp_path):
    rewrite(copy_of, lambda event: {**event, "format_version": 1} if event["type"] == "run" else event)
    assert_incomplete_naming(report(str(copy_of), tmp_path=tmp_path), "trace-9.jsonl", "format 1")


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "huge"])
def test_a_hostile_counts_checkpoint_is_a_lost_record_never_waited_on(copy_of, tmp_path, kind):
    """A process's counts checkpoint (trace-PID.counts.json) that is no regular file of a sane size: never read past
    its limit nor waited on; the run cannot pass and says which file it could not read."""
    checkpoint = copy_of / "trace-9.counts.json"
    checkpoint.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(checkpoint)
    elif kind == "huge":
        with open(checkpoint, "wb") as file:
            file.truncate(17 << 20)
    else:
        checkpoint.symlink_to("/dev/zero")
    assert_incomplete_naming(report(str(copy_of), tmp_path=tmp_path), "trace-9.counts.json")
