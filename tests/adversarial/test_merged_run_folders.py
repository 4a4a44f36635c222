"""A merge of run folders (one per node, `mlacheck report A B`) is no better than each folder alone: a node whose
folder observed no Python process, loaded no watched family or never reached a lookup made that node INCOMPLETE alone,
and merged with a healthy node's folder it passed (red-team, 0.7.3). Each folder is judged on its own evidence now."""

import json
import sys

import pytest

from tests.integration.cli import ROOT, run_cli

RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
ENV = {"PYTHONPATH": str(ROOT)}
KERNELS = "from tests.fixtures import synthetic_kernels as k\n"
SERVED = (
    KERNELS
    + "k.warmup(dtypes=('fp8',), causal=(True, False))\nk.dispatch(1, 'fp8', True)\nk.dispatch(1, 'fp8', False)\n"
)
NODES = {
    "no Python process": ["sh", "-c", "echo 'node1: no model shard, skipping'"],
    "no family loaded": [sys.executable, "-c", "import json; print(json.dumps({'status': 'ok'}))"],
    "warm-up only": [sys.executable, "-c", KERNELS + "k.warmup(dtypes=('fp8',), causal=(True, False))\n"],
}


def node(tmp_path, name: str, command: list[str]):
    run_dir = tmp_path / name
    result = run_cli("run", "-q", "--rules", RULES, "--run-dir", str(run_dir), "--", *command, env_extra=ENV)
    return result, run_dir


@pytest.mark.parametrize("how", list(NODES))
def test_a_node_that_checked_nothing_keeps_the_merge_from_passing(tmp_path, how):
    healthy, node0 = node(tmp_path, "node0", [sys.executable, "-c", SERVED])
    alone, node1 = node(tmp_path, "node1", NODES[how])
    assert healthy.code == 0 and alone.code == 2, healthy.stdout + alone.stdout  # each folder's own verdict
    saved = tmp_path / "merged.json"
    merged = run_cli("report", "-q", str(node0), str(node1), "--json", str(saved))
    report = json.loads(saved.read_text())
    assert merged.code == 2 and report["verdict"] == "incomplete", merged.stdout + merged.stderr
    assert any(reason.startswith(f"{node1}: ") for reason in report["incomplete"]), report["incomplete"]
    assert not any(reason.startswith(f"{node0}: ") for reason in report["incomplete"]), report["incomplete"]


def test_two_healthy_nodes_still_pass_merged(tmp_path):
    _, node0 = node(tmp_path, "node0", [sys.executable, "-c", SERVED])
    _, node1 = node(tmp_path, "node1", [sys.executable, "-c", SERVED])
    merged = run_cli("report", "-q", str(node0), str(node1))
    assert merged.code == 0 and "verdict: PASS" in merged.stdout, merged.stdout + merged.stderr


def test_a_node_whose_traces_and_tree_were_removed_keeps_the_merge_from_passing(tmp_path):
    _, node0 = node(tmp_path, "node0", [sys.executable, "-c", SERVED])
    _, node1 = node(tmp_path, "node1", [sys.executable, "-c", SERVED])
    for path in [*node1.glob("trace-*"), node1 / "processes.json"]:
        path.unlink()
    merged = run_cli("report", "-q", str(node0), str(node1))
    assert merged.code == 2 and "verdict: INCOMPLETE" in merged.stdout, merged.stdout + merged.stderr
    assert f"{node1}: no Python process was observed" in " ".join(merged.stdout.split())
