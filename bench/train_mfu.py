"""CPU MFU of a ~10M-parameter Llama-style model (context 256) against the jitted float32 matmul throughput measured
in the same run.

    .venv/bin/python bench/train_mfu.py [--steps 6] [--batch 8]

The matmul peak is the best FLOP/s of jitted n×n float32 matmuls (n = 512, 1024, 2048) on this machine, measured
before and after the training steps (the higher is used: the machine is shared and we want the conservative MFU).
MFU = flops_per_token × tokens/s / peak, with flops_per_token = 6 N_matmul + 12 L S H d_h (LlamaConfig.flops_per_token)."""
import argparse, os, time
os.environ.setdefault("MARIN_TRACKER", "disabled")
import jax, jax.numpy as jnp
from marin.models.transformer import LlamaConfig
from marin.train.optim import build_optimizer
from marin.train.sharding import make_mesh
from marin.train.trainer import (SyntheticDataConfig, TrainConfig, build_loader, device_batch, init_state, make_train_step,
                                 state_shardings)

def matmul_peak(sizes=(512, 1024, 2048), repeats=5) -> dict:
    out = {}
    for n in sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n)); b = jax.random.normal(jax.random.PRNGKey(1), (n, n))
        f = jax.jit(lambda a, b: a @ b); f(a, b).block_until_ready()
        best = min((lambda t: (f(a, b).block_until_ready(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(repeats))
        out[n] = 2 * n ** 3 / best
    return out

def step_time(cfg: TrainConfig, steps: int) -> float:
    mesh = make_mesh(cfg.mesh); opt, sched = build_optimizer(cfg.optimizer, 100)
    shard = state_shardings(cfg, mesh, opt); state = init_state(cfg, mesh, opt)
    fn = make_train_step(cfg, mesh, opt, sched, shard)
    ld = build_loader(cfg.data)
    batches = [device_batch(ld.batch(i), mesh, cfg.grad_accum, cfg.mesh.rules) for i in range(steps + 1)]
    state, m = fn(state, batches[0]); jax.block_until_ready(m)
    times = []
    for b in batches[1:]:
        t = time.perf_counter(); state, m = fn(state, b); jax.block_until_ready(m); times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]                                   # median step

if __name__ == "__main__":
    ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=6); ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    model = LlamaConfig(vocab_size=4096, seq_len=256, d_model=384, n_layers=6, n_heads=6, n_kv_heads=6, d_ff=1024)
    peak0 = matmul_peak()
    rows = []
    for attention in ("reference", "xla"):
        for remat in ("none", "block"):
            cfg = TrainConfig(model=model.replace(attention=attention), data=SyntheticDataConfig(vocab_size=4096, batch_size=args.batch, seq_len=256),
                              remat=remat, num_train_steps=100, progress=False)
            dt = step_time(cfg, args.steps)
            rows.append((attention, remat, dt, cfg.tokens_per_step / dt, model.flops_per_token(256) * cfg.tokens_per_step / dt))
    peak1 = matmul_peak()
    peak = max(max(peak0.values()), max(peak1.values()))
    print(f"\nModel: {model.summary()}; batch {args.batch} × 256 tokens; float32; {os.cpu_count()} CPU cores visible; jax {jax.__version__}")
    print("Jitted f32 matmul (same run): " + ", ".join(f"n={n}: {max(peak0[n], peak1[n]) / 1e9:.1f} GFLOP/s" for n in peak0))
    print("\n| attention | remat | step (s) | tokens/s | achieved GFLOP/s | matmul peak GFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|")
    for a, r, dt, tps, fl in rows:
        print(f"| {a} | {r} | {dt:.3f} | {tps:.0f} | {fl / 1e9:.1f} | {peak / 1e9:.1f} | {fl / peak:.0%} |")
