#!/usr/bin/env bash
# On the GPU machine (README: Development), after stash.sh ran with half a: install, then the GPU figures and
# tests, each step time-boxed so that one slow step does not cost the rest. Output: $OUT/log.txt and JSON reports.
set -u
bash .device-wheels/b/install.sh && bash .device-wheels/extra/install.sh && source /root/gpu-env.sh || exit 3
log=$OUT/log.txt
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s) $(date +%T)" >>"$log"; timeout "$limit" "$@" >>"$log" 2>&1; echo "--- rc=$?" >>"$log"; }
nvidia-smi -L >>"$log" 2>&1
# mlacheck installed from the tree (editable: its metadata, and the compiled hot path built in place) by the
# setuptools carried in extra/build-tools, as the README's `pip install .` does with a compiler there.
python3 -m pip install -q --no-index --no-deps --target /tmp/build-tools .device-wheels/extra/build-tools/*.whl >>"$log" 2>&1
step 120 env PYTHONPATH="/tmp/build-tools:${PYTHONPATH:-}" python3 -m pip install -q --no-build-isolation --no-deps --no-index -e .
step 20 python3 -c "from mlacheck.capture import hotpath; print('hot path:', hotpath.IMPLEMENTATION)"
step 200 python3 tests/benchmarks/bench_dispatch_overhead.py prefill 10000 8 all,wrapper,passthrough,none
step 150 python3 tests/benchmarks/bench_dispatch_overhead.py decode 10000 8 all,none
step 100 env MLACHECK_HOTPATH=python python3 tests/benchmarks/bench_dispatch_overhead.py prefill 10000 5
step 150 python3 -m mlacheck run --json "$OUT/default_trace.json"
step 60 python3 -m mlacheck run --profile vllm --tp 8 --kernel decode --compile skip --json "$OUT/vllm_tp8_trace.json"
step 200 python3 -m pytest -q -p no:cacheprovider tests/gpu tests/unit/test_reference.py tests/unit/test_activations.py \
  tests/unit/test_prefill_run.py tests/unit/test_decode_run.py tests/unit/test_hotpath.py tests/unit/test_dispatch_wrapper.py \
  tests/unit/test_capture_hooks.py
