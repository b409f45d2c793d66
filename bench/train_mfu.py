"""MFU of the real training step (`marin.train.trainer.make_train_step`: forward, backward, clipping, AdamW).

CPU (default): a ~10M-parameter Llama-style model at context 256 against the jitted float32 matmul throughput
measured in the same run, interleaved with the training steps.

    .venv/bin/python bench/train_mfu.py [--steps 5] [--batch 8,16]

The machine is shared, so a peak measured in a quiet moment and a step timed in a busy one would not compare.
Each training step is therefore paired with a matmul measurement taken right after it: a jitted chain of 1024×1024
float32 matmuls lasting about as long as the step. MFU = (model FLOPs per step / step time) / (matmul FLOPs /
chain time), median over the pairs, with model FLOPs from `LlamaConfig.flops_per_token` (6 N_matmul + 12 L S H d_h,
which counts the full S×S attention square). A second column uses process CPU seconds instead of wall seconds for
both sides (FLOPs per CPU-second of the step / of the matmul chain): it is less sensitive to other processes taking
the cores, since time we are descheduled is not counted on either side. The burst peak (best single 1024² matmul,
what the trainer's own `throughput/mfu` uses) is shown as well.

GPU (`--backend gpu`, for a machine with an NVIDIA GPU such as an H200): a ~125M-parameter model, bfloat16
compute, attention through `jax.nn.dot_product_attention(implementation="cudnn")` (cuDNN flash attention, causal in
the kernel) and, for comparison, the XLA attention; MFU against the datasheet dense bf16 peak of the device
(`marin.core.devices.DEVICE_PEAK_FLOPS`) and against a measured 8192² bf16 matmul. `bench/gpu_check.sh` runs it.
`--tiny` shrinks every shape so the path can be smoke-tested on a CPU."""

import argparse, dataclasses, os, sys, time

from _steal import cpu_s

os.environ.setdefault("MARIN_TRACKER", "disabled")
if (
    "--marin-from" in sys.argv
):  # before/after: import `marin` from an older tree (git archive REV marin | tar -x -C DIR)
    _dir = sys.argv[sys.argv.index("--marin-from") + 1]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # the checkout's editable install
    sys.path.insert(0, _dir)
import jax, jax.numpy as jnp, numpy as np
from marin.models.transformer import LlamaConfig
from marin.core.devices import measure_matmul_flops, peak_flops_per_device
from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training


N = 1024
_A = _B = None


@jax.jit
def chain(a, b, k):
    return jax.lax.fori_loop(0, k, lambda i, x: x @ b, a)


def matmul_rate(seconds: float) -> tuple[float, float]:
    "(FLOP per wall second, FLOP per CPU second) of a float32 matmul chain that runs for about `seconds`."
    global _A, _B
    if _A is None:
        _A = jax.random.normal(jax.random.PRNGKey(0), (N, N))
        _B = jax.random.normal(jax.random.PRNGKey(1), (N, N)) / N**0.5
        chain(_A, _B, 1).block_until_ready()  # compiled once; k is a traced argument
    t = time.perf_counter()
    chain(_A, _B, 2).block_until_ready()
    per = (time.perf_counter() - t) / 2  # calibrate
    k = max(2, int(seconds / per))
    c, t = cpu_s(), time.perf_counter()
    chain(_A, _B, k).block_until_ready()
    dt, dc = time.perf_counter() - t, cpu_s() - c
    return 2 * N**3 * k / dt, 2 * N**3 * k / max(dc, 1e-9)


def run(cfg: TrainConfig, steps: int, paired: bool) -> dict:
    "Compile the train step, run `steps` timed steps (each followed by a matmul chain when `paired`)."
    setup = setup_training(cfg)  # cfg.num_train_steps (100) sets the LR schedule only
    state, fn = setup.init_state(), setup.step
    batches = [setup.batch(i) for i in range(steps + 1)]
    t = time.perf_counter()
    state, m = fn(state, batches[0])
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t
    hlo = fn.lower(state, batches[0]).compile().as_text() or ""
    flops = cfg.model.flops_per_token(cfg.data.seq_len) * cfg.tokens_per_step
    rows = []
    for b in batches[1:]:
        c, t = cpu_s(), time.perf_counter()
        state, m = fn(state, b)
        jax.block_until_ready(m)
        dt, dc = time.perf_counter() - t, cpu_s() - c
        wall_rate, cpu_rate = matmul_rate(dt) if paired else (float("nan"), float("nan"))
        rows.append((dt, flops / dt, wall_rate, (flops / dt) / wall_rate, (flops / max(dc, 1e-9)) / cpu_rate))
    dt, achieved, peak, mfu, mfu_cpu = (float(np.median(x)) for x in zip(*rows))
    return {
        "step_s": dt,
        "tokens_s": cfg.tokens_per_step / dt,
        "achieved": achieved,
        "paired_peak": peak,
        "mfu": mfu,
        "mfu_cpu": mfu_cpu,
        "compile_s": compile_s,
        "loss": float(m["loss"]),
        "cudnn": "cudnn" in hlo.lower(),
    }


def main_cpu(args):
    model = LlamaConfig(vocab_size=4096, seq_len=256, d_model=384, n_layers=6, n_heads=6, n_kv_heads=6, d_ff=1024)
    seq = 256
    if args.tiny:
        model, seq = (
            LlamaConfig(vocab_size=256, seq_len=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128),
            32,
        )
    burst = measure_matmul_flops()
    variants = [(a.split("/")[0], a.split("/")[1], a.split("/")[2]) for a in args.variants.split(",")]
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        for attention, remat, loop in variants:
            if "layer_loop" not in {f.name for f in dataclasses.fields(LlamaConfig)}:
                loop = "scan (code before layer_loop)"  # run against an older checkout
            kw = {"layer_loop": loop} if not loop.startswith("scan (") else {}
            cfg = TrainConfig(
                model=model.replace(attention=attention, **kw),
                data=SyntheticDataConfig(vocab_size=model.vocab_size, batch_size=batch, seq_len=seq),
                remat=remat,
                num_train_steps=100,
                progress=False,
            )
            r = run(cfg, args.steps, paired=True)
            rows.append((batch, attention, remat, loop, r))
            print(
                f"  batch {batch} {attention}/{remat}/{loop}: step {r['step_s']:.3f}s MFU {r['mfu']:.0%} (cpu-time {r['mfu_cpu']:.0%})",
                flush=True,
            )
    load = os.getloadavg()
    import marin

    print(f"\nmarin imported from {os.path.dirname(marin.__file__)}")
    print(
        f"Model: {model.summary()}; context {seq}; float32; {os.cpu_count()} CPUs visible; jax {jax.__version__}; "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) at the end"
    )
    print(f"Burst peak (best single 1024^2 f32 matmul): {burst / 1e9:.1f} GFLOP/s\n")
    print(
        "| batch | attention | remat | layer loop | step (s) | tokens/s | model GFLOP/s | paired matmul GFLOP/s | MFU (paired) | MFU (CPU time) | MFU (burst peak) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for batch, a, rm, loop, r in rows:
        print(
            f"| {batch} | {a} | {rm} | {loop} | {r['step_s']:.3f} | {r['tokens_s']:.0f} | {r['achieved'] / 1e9:.1f} | "
            f"{r['paired_peak'] / 1e9:.1f} | {r['mfu']:.0%} | {r['mfu_cpu']:.0%} | {r['achieved'] / burst:.0%} |"
        )


def main_gpu(args):
    on_gpu = jax.default_backend() == "gpu"
    model = LlamaConfig(vocab_size=32000, seq_len=1024, d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_ff=2048)
    seq, batches = 1024, [int(b) for b in args.batch.split(",")] if args.batch else [16, 32]
    if args.tiny:
        model, seq, batches = (
            LlamaConfig(vocab_size=256, seq_len=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128),
            64,
            [2],
        )
    peak, src = peak_flops_per_device()
    mm_n = 8192 if on_gpu else 256
    mm = measure_matmul_flops(n=mm_n, dtype=jnp.bfloat16)
    print(
        f"Device: {jax.devices()[0].device_kind} ({jax.default_backend()}); peak {peak / 1e12:.1f} TFLOP/s ({src}); "
        f"measured {mm_n}^2 bf16 matmul {mm / 1e12:.2f} TFLOP/s; jax {jax.__version__}",
        flush=True,
    )
    impls = ["cudnn", "xla"] if on_gpu else ["xla"]  # cuDNN exists only on NVIDIA GPUs
    rows = []
    for batch in batches:
        for impl in impls:
            cfg = TrainConfig(
                model=model.replace(attention=impl),
                compute_dtype="bfloat16",
                remat=args.remat,
                data=SyntheticDataConfig(vocab_size=model.vocab_size, batch_size=batch, seq_len=seq),
                num_train_steps=100,
                progress=False,
            )
            try:
                r = run(cfg, args.steps, paired=False)
            except Exception as e:  # e.g. cuDNN refuses the shapes: say so, go on
                print(f"  batch {batch} {impl}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            rows.append((batch, impl, r))
            print(
                f"  batch {batch} {impl}: step {r['step_s'] * 1e3:.1f} ms, compile {r['compile_s']:.0f}s, cuDNN in HLO: {r['cudnn']}",
                flush=True,
            )
    print(f"\nModel: {model.summary()}; context {seq}; bfloat16 compute, float32 params; remat {args.remat}")
    print(
        "| batch | attention | cuDNN kernel in HLO | step (ms) | tokens/s | model TFLOP/s | MFU vs datasheet peak | MFU vs measured bf16 matmul |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for batch, impl, r in rows:
        print(
            f"| {batch} | {impl} | {r['cudnn']} | {r['step_s'] * 1e3:.1f} | {r['tokens_s']:,.0f} | {r['achieved'] / 1e12:.1f} | "
            f"{r['achieved'] / peak:.1%} | {r['achieved'] / mm:.1%} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--backend",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: ~10M f32 model, paired matmul peak; gpu: ~125M bf16 model",
    )
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", default="", help="comma-separated batch sizes (cpu default 8,16; gpu default 16,32)")
    ap.add_argument(
        "--variants",
        default="reference/none/auto,reference/none/scan,xla/none/auto,reference/block/auto",
        help="cpu: attention/remat/layer_loop triples",
    )
    ap.add_argument("--remat", default="none", help="gpu: remat policy")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: a smoke test of the code path on any machine")
    ap.add_argument(
        "--marin-from", default="", help="import marin from this directory (an older tree) instead of the checkout"
    )
    args = ap.parse_args()
    if args.backend == "cpu":
        args.batch = args.batch or "8,16"
        main_cpu(args)
    else:
        main_gpu(args)
