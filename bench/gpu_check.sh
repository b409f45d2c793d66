#!/usr/bin/env bash
# One short GPU check (a few minutes on an NVIDIA H200): MFU of a ~125M-parameter Llama-style model, bfloat16
# compute, cuDNN flash attention vs XLA attention, against the datasheet bf16 peak and a measured bf16 matmul.
#   bash bench/gpu_check.sh            # prints a Markdown table for BENCHMARKS.md ("## Dense model and trainer")
#   bash bench/gpu_check.sh --tiny     # smoke test of the same code path on any machine (CPU included)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi (not an NVIDIA machine)"
$PY -c "import jax; print('jax', jax.__version__, jax.devices())"
exec $PY bench/train_mfu.py --backend gpu --steps "${STEPS:-10}" "$@"
