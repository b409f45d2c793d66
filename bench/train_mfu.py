"""CPU MFU of a ~10M-parameter Llama-style model (context 256) against the jitted float32 matmul throughput measured
in the same run, interleaved with the training steps.

    .venv/bin/python bench/train_mfu.py [--steps 5] [--batch 8]

The machine is shared, so a peak measured in a quiet moment and a step timed in a busy one would not compare.
Each training step is therefore paired with a matmul measurement taken right after it: a jitted chain of 1024×1024
float32 matmuls lasting about as long as the step. MFU = (model FLOPs per step / step time) / (matmul FLOPs /
chain time), median over the pairs, with model FLOPs from `LlamaConfig.flops_per_token` (6 N_matmul + 12 L S H d_h).
The burst peak (best single 1024 matmul, what the trainer's own `throughput/mfu` uses) is shown as well."""
import argparse, os, time
os.environ.setdefault("MARIN_TRACKER", "disabled")
import jax, jax.numpy as jnp, numpy as np
from marin.models.transformer import LlamaConfig
from marin.train.optim import build_optimizer
from marin.train.sharding import make_mesh
from marin.train.trainer import (SyntheticDataConfig, TrainConfig, build_loader, device_batch, init_state, make_train_step,
                                 state_shardings, measure_matmul_flops)

N = 1024
A = jax.random.normal(jax.random.PRNGKey(0), (N, N)); B = jax.random.normal(jax.random.PRNGKey(1), (N, N)) / N ** 0.5
@jax.jit
def chain(a, b, k):
    return jax.lax.fori_loop(0, k, lambda i, x: x @ b, a)

def matmul_rate(seconds: float) -> float:
    "FLOP/s of a matmul chain that runs for about `seconds`."
    chain(A, B, 1).block_until_ready()                                # compiled once; k is a traced argument
    t = time.perf_counter(); chain(A, B, 4).block_until_ready(); per = (time.perf_counter() - t) / 4   # calibrate
    k = max(2, int(seconds / per))
    t = time.perf_counter(); chain(A, B, k).block_until_ready(); dt = time.perf_counter() - t
    return 2 * N ** 3 * k / dt

def run(cfg: TrainConfig, steps: int):
    mesh = make_mesh(cfg.mesh); opt, sched = build_optimizer(cfg.optimizer, 100)
    shard = state_shardings(cfg, mesh, opt); state = init_state(cfg, mesh, opt)
    fn = make_train_step(cfg, mesh, opt, sched, shard)
    ld = build_loader(cfg.data)
    batches = [device_batch(ld.batch(i), mesh, cfg.grad_accum, cfg.mesh.rules) for i in range(steps + 1)]
    state, m = fn(state, batches[0]); jax.block_until_ready(m)
    flops = cfg.model.flops_per_token(cfg.data.seq_len) * cfg.tokens_per_step
    pairs = []
    for b in batches[1:]:
        t = time.perf_counter(); state, m = fn(state, b); jax.block_until_ready(m); dt = time.perf_counter() - t
        pairs.append((dt, flops / dt, matmul_rate(dt)))
    dt, achieved, peak = (float(np.median(x)) for x in zip(*pairs))
    mfu = float(np.median([a / p for _, a, p in pairs]))
    return dt, achieved, peak, mfu

if __name__ == "__main__":
    ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=5); ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    model = LlamaConfig(vocab_size=4096, seq_len=256, d_model=384, n_layers=6, n_heads=6, n_kv_heads=6, d_ff=1024)
    burst = measure_matmul_flops()
    rows = []
    for attention, remat in (("reference", "block"), ("xla", "none"), ("xla", "block")):
        cfg = TrainConfig(model=model.replace(attention=attention), data=SyntheticDataConfig(vocab_size=4096, batch_size=args.batch, seq_len=256),
                          remat=remat, num_train_steps=100, progress=False)
        dt, achieved, peak, mfu = run(cfg, args.steps)
        rows.append((attention, remat, dt, cfg.tokens_per_step / dt, achieved, peak, mfu, achieved / burst))
    print(f"\nModel: {model.summary()}; batch {args.batch} x 256 tokens; float32; {os.cpu_count()} CPUs visible; jax {jax.__version__}")
    print(f"Burst peak (best single 1024^2 f32 matmul): {burst / 1e9:.1f} GFLOP/s\n")
    print("| attention | remat | step (s) | tokens/s | model GFLOP/s | paired matmul GFLOP/s | MFU (paired) | MFU (burst peak) |")
    print("|---|---|---|---|---|---|---|---|")
    for a, r, dt, tps, ach, pk, mfu, mb in rows:
        print(f"| {a} | {r} | {dt:.3f} | {tps:.0f} | {ach / 1e9:.1f} | {pk / 1e9:.1f} | {mfu:.0%} | {mb:.0%} |")
