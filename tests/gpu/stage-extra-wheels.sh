#!/usr/bin/env bash
# mlacheck's own pure dependencies that the GPU machine's image may lack (pydantic, packaging, pytest),
# as Python 3.12 wheels in .device-wheels/extra with an install script, and the setuptools that builds the
# compiled hot path there (extra/build-tools, used for that build only); carry that folder beside half b:
#   bash .device-wheels/b/install.sh && bash .device-wheels/extra/install.sh && source /root/gpu-env.sh && ...
# Run from the project root, after ../shared/device/stage-wheels.sh.
set -euo pipefail
dest=.device-wheels/extra
mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
  pydantic pydantic-core annotated-types typing-inspection typing-extensions packaging pytest iniconfig pluggy
python3 -m pip download -q --no-deps --only-binary=:all: -d "$dest/build-tools" "setuptools>=77"
# DeepGEMM for tests/gpu/test_deep_gemm_sm90.py (tests/gpu/README-deep-gemm.md): vLLM 0.34.0's vendored copy, whose
# extension is built on torch's stable ABI and so loads against the device's torch (sgl-deep-gemm 0.2.5's does not);
# its folder, the wheel's metadata and the two package __init__ files stubbed (they import the whole engine), 6 MB
vllm_wheel=$(ls "${MLACHECK_WHEEL_CACHE:-$HOME/.cache/mlacheck-tests/wheels}"/vllm-0.34.0/*.whl 2>/dev/null | head -1 || true)
if [ -z "$vllm_wheel" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$dest/vllm-wheel" vllm==0.34.0
  vllm_wheel=$(ls "$dest"/vllm-wheel/*.whl)
fi
site=$(mktemp -d)
python3 - "$vllm_wheel" "$site" <<'PACK'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [name for name in wheel.namelist()
                                   if name.startswith("vllm/third_party/deep_gemm/") or ".dist-info/" in name])
PACK
: >"$site/vllm/__init__.py"; : >"$site/vllm/third_party/__init__.py"
tar cJf "$dest/vllm-deep-gemm.tar.xz" -C "$site" .
rm -rf "$site" "$dest/vllm-wheel"
# FlashInfer 0.7.2 (SGLang 0.5.23's pin) and its pure dependencies, for trace mode of its CuTe DSL MLA decode: its
# wheel (65 MB, mostly csrc and headers for nvcc JIT modules in flashinfer/data) is over one transfer, and the CuTe DSL
# kernels need none of that folder, so the site travels without it (device_run.sh unpacks it to /tmp/flashinfer-site).
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --target "$site" flashinfer-python==0.7.2 nvidia-ml-py tabulate tqdm requests \
  certifi idna urllib3 charset-normalizer
rm -rf "$site/flashinfer/data" "$site/bin"; find "$site" -name __pycache__ -prune -exec rm -rf {} +
tar cJf "$dest/flashinfer-site.tar.xz" -C "$site" .
rm -rf "$site"
cat > "$dest/install.sh" <<'INSTALL'
#!/usr/bin/env bash
# On the GPU machine: install the wheels the image lacks into /tmp/site-extra, never over the image's own.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/site-extra
for wheel in "$here"/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1 | tr _ -)
  python3 -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$name" 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --target /tmp/site-extra "$wheel"
done
echo "export PYTHONPATH=\$PYTHONPATH:/tmp/site-extra" >> /root/gpu-env.sh
INSTALL
du -sh "$dest"
