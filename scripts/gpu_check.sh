#!/usr/bin/env bash
# The GPU check (docs/trainer.md): the embedded engine and one trainer step on CUDA in bf16.
# For a GPU machine that has PyTorch + transformers (+ aiohttp, jinja2, numpy, safetensors) and no network:
# the pure-Python packages legorl needs beyond those are installed from wheels in $LEGORL_WHEELS (default
# .whl; docs/trainer.md lists them and the pip command that fetches them).
#   bash scripts/gpu_check.sh --tokenizer path/to/smollm2-tokenizer     # random SmolLM2-135M-shaped weights
#   bash scripts/gpu_check.sh --model path/to/hf-model-dir
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${LEGORL_WHEELS:-.whl}
if ! python3 -c "import pydantic, tomli_w, gguf" 2>/dev/null; then
  [ -d "$wheels" ] || { echo "error: pydantic/tomli_w/gguf missing and no wheels in $wheels (docs/trainer.md)" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/legorl-site "$wheels"/*.whl
  export PYTHONPATH=/tmp/legorl-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec python3 scripts/gpu_check.py "$@"
