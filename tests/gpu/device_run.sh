#!/usr/bin/env bash
# On the GPU machine (README: Development), after stash.sh ran with half a. Two parts, each one device call:
#   bash tests/gpu/device_run.sh measure   # install, the hot path, the overhead benchmarks, execute mode's runs
#   bash tests/gpu/device_run.sh tests     # tests/gpu, trace mode of FlashInfer's decode (the machine still warm)
# Each step is time-boxed so that one slow step does not cost the rest. Output: $OUT/log-PART.txt and JSON reports.
set -u
part=${1:?measure or tests}
log=$OUT/log-$part.txt
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s) $(date +%T)" >>"$log"; timeout "$limit" "$@" >>"$log" 2>&1; echo "--- rc=$?" >>"$log"; }
if [ "$part" = measure ]; then
  bash .device-wheels/b/install.sh && bash .device-wheels/extra/install.sh || exit 3
  mkdir -p /tmp/flashinfer-site && tar xJf .device-wheels/extra/flashinfer-site.tar.xz -C /tmp/flashinfer-site
fi
source /root/gpu-env.sh || exit 3
nvidia-smi -L >>"$log" 2>&1
if [ "$part" = measure ]; then
  # mlacheck installed from the tree (editable: its metadata, and the compiled hot path built in place) by the
  # setuptools carried in extra/build-tools, as the README's `pip install .` does with a compiler there.
  python3 -m pip install -q --no-index --no-deps --target /tmp/build-tools .device-wheels/extra/build-tools/*.whl >>"$log" 2>&1
  step 120 env PYTHONPATH="/tmp/build-tools:${PYTHONPATH:-}" python3 -m pip install -q --no-build-isolation --no-deps --no-index -e .
  step 20 python3 -c "from mlacheck.capture import hotpath; print('hot path:', hotpath.IMPLEMENTATION)"
  step 150 python3 -m mlacheck run --profile vllm --kernel prefill --requests 6 --json "$OUT/execute_vllm_fa4.json"
  step 150 python3 tests/benchmarks/bench_dispatch_overhead.py prefill 10000 8 all,none
  step 120 python3 tests/benchmarks/bench_dispatch_overhead.py decode 10000 8 all,none
  step 90 python3 tests/benchmarks/bench_triton_launch.py 2000 20
else
  step 330 env MLACHECK_GPU_OUT="$OUT" python3 -m pytest -q -p no:cacheprovider tests/gpu
  step 120 env PYTHONPATH="${PYTHONPATH:-}:/tmp/flashinfer-site" python3 -m mlacheck run --profile sglang \
    --cuda-graph-max-bs 8 --batch-sizes 4,16 --json "$OUT/trace_sglang_flashinfer.json"
  step 90 python3 -m mlacheck run --profile vllm --json "$OUT/vllm_all_on_h200.json"
fi
