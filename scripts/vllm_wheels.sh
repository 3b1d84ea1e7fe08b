#!/usr/bin/env bash
# Download what vLLM needs on a CUDA machine without network access (docs/vllm.md):
#
#   bash scripts/vllm_wheels.sh           # on a machine with PyPI; then copy .whl/ and .vllm/ with the tree
#
# - .vllm/vllm-<version>-py.tar.xz: vLLM's Python files (the .py sources, JSON configs, templates and the
#   dist-info, whose entry points and version vLLM reads), without the compiled extensions (*.so, several
#   hundred MiB of CUDA code), the Rust front end binary and the C++/CUDA headers. scripts/gpu/vllm_e2e.py
#   unpacks it and supplies the few compiled ops a small model touches in plain torch.
# - .whl/*.whl: the pure-Python and small binary wheels that an offline `vllm.LLM(...)` run imports beyond
#   the H200 setup of docs/measuring.md (torch 2.11, Triton 3.6); scripts/gpu/run.sh installs them.
#
# Environment: VLLM_VERSION (0.26.0), PYVER (3.12, the CUDA machine's Python), WHEELS (.whl), DEST (.vllm).
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=${VLLM_VERSION:-0.26.0}
PYVER=${PYVER:-3.12}
WHEELS=${WHEELS:-.whl}
DEST=${DEST:-.vllm}
# name==version: what vLLM 0.26.0's import chain for LLM(...) needs beyond that setup, found by importing
# vllm's engine, worker, model, quantization and attention modules and listing the distributions loaded
# (not xgrammar: its wheel is 48 MiB; structured outputs are not used, and scripts/gpu/vllm_e2e.py gives the
# import a placeholder module)
PACKAGES=(
  annotated-types==0.8.0 blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0
  compressed-tensors==0.17.0 distro==1.9.0 fastapi==0.136.3 jiter==0.19.0 llguidance==1.7.6 loguru==0.7.3
  msgspec==0.23.0 openai==2.54.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2
  partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0
  setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 typing-extensions==4.16.0 typing-inspection==0.4.5
)

mkdir -p "$WHEELS" "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$WHEELS" "${PACKAGES[@]}"

archive="$DEST/vllm-$VLLM_VERSION-py.tar.xz"
if [ ! -f "$archive" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "vllm==$VLLM_VERSION"
  mkdir "$tmp/x"
  python3 -m zipfile -e "$tmp"/vllm-*.whl "$tmp/x"
  (cd "$tmp/x" && find vllm "vllm-$VLLM_VERSION.dist-info" -type f \( -name '*.py' -o -name '*.json' \
    -o -name '*.jinja' -o -name '*.typed' -o -name '*.txt' -o -name 'METADATA' -o -name '*.yaml' \) \
    ! -path '*/third_party/fmha_sm100/*' -print0 | sort -z | tar --null -T - -cJf "$OLDPWD/$archive")
fi
du -sh "$WHEELS" "$DEST"
du -cb "$WHEELS"/*.whl "$DEST"/* | tail -1 | awk '{printf "total: %.1f MiB\n", $1 / 1048576}'
