"""Peak memory of a compiled training step (XLA's own buffer assignment) vs the dry run's analytic estimate.

    .venv/bin/python bench/train_memory.py

Compiles (does not run) the step for a ~10M-parameter model under several remat policies and dtypes and prints a
Markdown table. XLA's memory analysis is the peak the runtime will allocate for arguments + outputs + temporaries
(minus donated/aliased buffers): on CPU it is the most faithful 'measured peak' available without a device allocator."""

import os, sys, time

os.environ.setdefault("MARIN_TRACKER", "disabled")
import jax
from marin.models.transformer import LlamaConfig
from marin.train.cli import estimate_memory
from marin.train.optim import build_optimizer
from marin.train.sharding import make_mesh
from marin.train.trainer import (
    SyntheticDataConfig,
    TrainConfig,
    make_train_step,
    state_shardings,
    init_state,
    device_batch,
    build_loader,
)

MODEL = LlamaConfig(vocab_size=4096, seq_len=256, d_model=384, n_layers=6, n_heads=6, n_kv_heads=6, d_ff=1024)


def measured_peak(cfg: TrainConfig) -> float:
    mesh = make_mesh(cfg.mesh)
    opt, sched = build_optimizer(cfg.optimizer, cfg.num_train_steps)
    shard = state_shardings(cfg, mesh, opt)
    state = jax.eval_shape(lambda: init_state(cfg, mesh, opt))
    state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, shard)
    b = build_loader(cfg.data).batch(0)
    batch = {
        k: jax.ShapeDtypeStruct((cfg.grad_accum, v.shape[0] // cfg.grad_accum, v.shape[1]), v.dtype)
        for k, v in b.items()
    }
    ma = make_train_step(cfg, mesh, opt, sched, shard).lower(state, batch).compile().memory_analysis()
    return ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes


rows = []
for remat in ("none", "dots", "block"):
    for dtype in ("float32", "bfloat16"):
        for batch, accum in ((8, 1), (16, 4)):
            cfg = TrainConfig(
                model=MODEL,
                data=SyntheticDataConfig(vocab_size=4096, batch_size=batch, seq_len=256),
                remat=remat,
                compute_dtype=dtype,
                grad_accum=accum,
                num_train_steps=10,
                progress=False,
            )
            est = estimate_memory(cfg, 1).total
            t = time.perf_counter()
            meas = measured_peak(cfg)
            dt = time.perf_counter() - t
            rows.append((remat, dtype, f"{batch}/{accum}", est / 2**20, meas / 2**20, (est - meas) / meas, dt))
            print(rows[-1], file=sys.stderr, flush=True)
print(f"\nModel: {MODEL.summary()}; seq 256; jax {jax.__version__}, {jax.devices()[0].device_kind}\n")
print("| remat | compute | batch/accum | dry-run estimate (MiB) | XLA peak (MiB) | estimate error |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:+.0%} |")
