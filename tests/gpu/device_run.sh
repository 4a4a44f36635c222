#!/usr/bin/env bash
# On the GPU machine (docs/development.md), after stash.sh ran with half a, one device call per line:
#   bash tests/gpu/device_run.sh install measure   # install, the hot path, the overhead benchmarks, execute mode's run
#   bash tests/gpu/device_run.sh tests             # tests/gpu (the machine still warm; about 7 min on an H100)
#   bash tests/gpu/device_run.sh traces            # the trace-mode runs of the SGLang and vLLM profiles
#   bash tests/gpu/device_run.sh install deep_gemm # DeepGEMM alone: its GPU tests, a hit's cost, where a hit's time goes
#                                                  (in that order: the least needed last, where a short call cuts it)
#   bash tests/gpu/device_run.sh lite deep_gemm    # the same in one call, with extra alone carried (no stash.sh first)
#   bash tests/gpu/device_run.sh lite hits deep_gemm  # a DeepGEMM hit's cost three times first (issue 28's last figure)
# Each step is time-boxed so that one slow step does not cost the rest. Output: $OUT/log-PART.txt and JSON reports.
set -u
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s) $(date +%T)" >>"$log"; timeout "$limit" "$@" >>"$log" 2>&1; echo "--- rc=$?" >>"$log"; }
install_mlacheck() {
  mkdir -p /tmp/vllm-deep-gemm-site && tar xJf .device-wheels/extra/vllm-deep-gemm.tar.xz -C /tmp/vllm-deep-gemm-site
  source /root/gpu-env.sh || exit 3
  nvidia-smi -L >>"$log" 2>&1
  # mlacheck installed from the tree (editable: its metadata, and the compiled hot path built in place) by the
  # setuptools carried in extra/build-tools, as the README's `pip install .` does with a compiler there.
  python3 -m pip install -q --no-index --no-deps --target /tmp/build-tools .device-wheels/extra/build-tools/*.whl >>"$log" 2>&1
  step 120 env PYTHONPATH="/tmp/build-tools:${PYTHONPATH:-}" python3 -m pip install -q --no-build-isolation --no-deps --no-index -e .
  step 20 python3 -c "from mlacheck.capture import hotpath; print('hot path:', hotpath.IMPLEMENTATION)"
}
deep_gemm_env() {
  source /root/gpu-env.sh || exit 3
  export MLACHECK_VLLM_DEEP_GEMM_SITE=/tmp/vllm-deep-gemm-site
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)  # DeepGEMM's JIT finds nvcc through CUDA_HOME
  [ -n "${CUDA_HOME:-}" ] || [ -z "$nvcc" ] || export CUDA_HOME=$(dirname "$(dirname "$nvcc")")
  echo "CUDA_HOME=${CUDA_HOME:-} nvcc=$nvcc" >>"$log"
}
for part in "$@"; do
  log=$OUT/log-$part.txt
  case $part in
  install)
    bash .device-wheels/b/install.sh && bash .device-wheels/extra/install.sh || exit 3
    mkdir -p /tmp/flashinfer-site && tar xJf .device-wheels/extra/flashinfer-site.tar.xz -C /tmp/flashinfer-site
    install_mlacheck
    ;;
  lite)
    # What DeepGEMM's part needs, in one call with extra alone (no CuTe DSL, tokenspeed-mla or FlashInfer: program
    # mode loads a family only where its library imports).
    printf 'export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}\nexport PYTHONUNBUFFERED=1\n' > /root/gpu-env.sh
    bash .device-wheels/extra/install.sh || exit 3
    install_mlacheck
    ;;
  measure)
    source /root/gpu-env.sh || exit 3
    step 150 python3 -m mlacheck run --profile vllm --kernel prefill --requests 6 --json "$OUT/execute_vllm_fa4.json"
    step 150 python3 tests/benchmarks/bench_dispatch_overhead.py prefill 10000 8 all,none
    step 120 python3 tests/benchmarks/bench_dispatch_overhead.py decode 10000 8 all,none
    step 90 python3 tests/benchmarks/bench_triton_launch.py 2000 20
    ;;
  hits)
    deep_gemm_env
    for run in 1 2 3; do
      step 120 python3 tests/benchmarks/bench_jit_watchers.py deep_gemm 4000 vllm.third_party.deep_gemm
    done
    ;;
  deep_gemm)
    deep_gemm_env
    step 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_deep_gemm_sm90.py
    step 200 python3 tests/benchmarks/bench_deep_gemm_gpu.py vllm.third_party.deep_gemm 2000
    step 120 python3 tests/benchmarks/bench_jit_watchers.py deep_gemm 4000 vllm.third_party.deep_gemm  # in one process
    program="tests/fixtures/programs/deep_gemm_gpu.py"
    profiled=(env "PYTHONPATH=$MLACHECK_VLLM_DEEP_GEMM_SITE:$PWD:${PYTHONPATH:-}" DG_GPU_MODULE=vllm.third_party.deep_gemm
              DG_JIT_CACHE_DIR=/tmp/dg-profile DG_GPU_WARMUP=16 DG_GPU_SERVE=16 DG_GPU_PROFILE=1)
    step 100 "${profiled[@]}" python3 "$program"
    step 100 "${profiled[@]}" python3 -m mlacheck run -q --run-dir /tmp/dg-profile-run -- python3 "$program"
    ;;
  tests)
    source /root/gpu-env.sh || exit 3
    step 560 env MLACHECK_GPU_OUT="$OUT" python3 -m pytest -q -p no:cacheprovider tests/gpu
    ;;
  traces)
    source /root/gpu-env.sh || exit 3
    step 120 env PYTHONPATH="${PYTHONPATH:-}:/tmp/flashinfer-site" python3 -m mlacheck run --profile sglang \
      --cuda-graph-max-bs 8 --batch-sizes 4,16 --json "$OUT/trace_sglang_flashinfer.json"
    step 120 python3 -m mlacheck run --profile vllm --kernel prefill --arch sm_100a --requests 6 \
      --json "$OUT/trace_vllm_fa4_sm100a.json"
    ;;
  esac
done
