"""The engine modules' plans are the published engines' own arithmetic (marker `network`: the releases come from PyPI):
each engine function the scenario models is read from its release's file and run beside the module's model of it
over many inputs. The functions need none of the engine's imports, so each is executed alone from its source."""

import __future__

import ast
import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from mlacheck.scenario.engines import ENGINES
from mlacheck.scenario.engines.vllm import PAGE, WORKSPACE_ROWS, context_chunks
from mlacheck.scenario.prefill_traffic import Request
from tests.integration.published import extracted

pytestmark = pytest.mark.network


def published(tmp_path_factory, requirement: str, path: str, *names: str, **namespace):
    """The functions and classes `names` ("Class.method" for a method, which becomes a function of its `self`) of
    `path` in the release, executed alone in `namespace` (annotations are not evaluated)."""
    folder = extracted(tmp_path_factory.mktemp(requirement.replace("=", "_")), requirement, (path,))
    tree = ast.parse((folder / path).read_text(encoding="utf-8"))
    nodes = [_node(tree, name.split("."), f"{requirement} {path}") for name in names]
    scope = {"dataclass": dataclass, **namespace}
    code = compile(ast.Module(nodes, []), f"{requirement}:{path}", "exec", flags=__future__.annotations.compiler_flag)
    exec(code, scope)  # noqa: S102 - the release's own code, alone
    return [scope[name.split(".")[-1]] for name in names]


def _node(tree: ast.AST, qualname: list[str], where: str) -> ast.stmt:
    found = next((node for node in tree.body if getattr(node, "name", None) == qualname[0]), None)
    assert found is not None, f"{where} no longer defines {'.'.join(qualname)}"
    return found if len(qualname) == 1 else _node(found, qualname[1:], where)


def test_vllm_context_chunks_are_plan_mla_context_chunks(tmp_path_factory):
    _, plan = published(
        tmp_path_factory,
        "vllm==0.34.0",
        "vllm/model_executor/layers/attention/mla_attention.py",
        "_ContextChunkPlan",
        "plan_mla_context_chunks",
        round_down=lambda value, multiple: value // multiple * multiple,
    )
    rng = random.Random(0)
    for _ in range(2000):
        batch = tuple(
            Request(rng.randint(1, 64), rng.choice([0, rng.randint(1, 600)])) for _ in range(rng.randint(1, 6))
        )
        rows = rng.choice([PAGE, 100, 128, 300, 1000, WORKSPACE_ROWS])
        theirs = plan([r.prefix_len for r in batch], rows, rows // PAGE * PAGE, PAGE, lambda count: count)
        ours = context_chunks(batch, rows)
        assert [(c.first, c.kv_lens, c.kv_starts) for c in ours] == [
            (p.request_start, tuple(p.seq_lens), tuple(p.starts)) for p in theirs
        ], (batch, rows)
        assert all(
            c.q_lens == tuple(r.extend_len for r in batch[p.request_start : p.request_end])
            for c, p in zip(ours, theirs)
        )


MAXIMA = [*range(1, 300), 320, 511, 512, 513, 600, 1000, 1024]


def test_sglang_0_5_23_captures_generate_decode_cuda_graph_batch_sizes(tmp_path_factory):
    [generate] = published(
        tmp_path_factory,
        "sglang==0.5.23",
        "sglang/srt/arg_groups/cuda_graph_hook.py",
        "generate_decode_cuda_graph_batch_sizes",
        resolving_view=lambda args: args,
    )
    args = SimpleNamespace(disable_cuda_graph_padding=False, speculative_algorithm=None)
    for maximum in MAXIMA:
        assert ENGINES["sglang"].decode.capture_sizes(maximum) == generate(args, maximum), maximum


def test_sglang_0_5_13_captures_generate_cuda_graph_batch_sizes(tmp_path_factory):
    [generate] = published(
        tmp_path_factory, "sglang==0.5.13", "sglang/srt/server_args.py", "ServerArgs._generate_cuda_graph_batch_sizes"
    )
    for maximum in MAXIMA:
        args = SimpleNamespace(cuda_graph_max_bs=maximum, disable_cuda_graph_padding=False, speculative_algorithm=None)
        expected = generate(args)
        assert ENGINES["sglang@0.5.13"].decode.capture_sizes(maximum) == expected, maximum


def test_tokenspeed_captures_get_batch_sizes_to_capture(tmp_path_factory):
    [capture] = published(
        tmp_path_factory,
        "tokenspeed==0.1.1",
        "tokenspeed/runtime/execution/forward_step.py",
        "get_batch_sizes_to_capture",
    )
    for maximum in MAXIMA:
        config = SimpleNamespace(
            cudagraph_capture_sizes=None,
            max_num_seqs=160,  # its default without speculative decoding (runtime/utils/server_args.py:785-789)
            data_parallel_size=1,
            disable_cuda_graph_padding=False,
            max_cudagraph_capture_size=maximum,
        )
        assert ENGINES["tokenspeed"].decode.capture_sizes(maximum) == capture(config), maximum
