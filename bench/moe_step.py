"""MoE vs dense *training step* time (the trainer's own jitted step: forward, backward, AdamW, router-bias update),
at the same active parameters, measured side by side in one process. Prints a Markdown table.

    .venv/bin/python bench/moe_step.py                       # the moe_balancing experiment's shape
    .venv/bin/python bench/moe_step.py --d-model 256 --d-expert 256 --batch 16 --seq 256   # wider: expert matmuls dominate

The dense reference is the same model with `d_ff = top_k * d_expert` (same active matmul parameters). Steps of
the models are interleaved (round-robin, `--rounds` rounds of `--steps` steps each) so that load from other jobs
hits both alike; the table reports the median per-step wall time over rounds and the median process CPU time
per step (all threads; less sensitive to other jobs on a shared machine than wall time).
"""

import argparse, dataclasses, os, statistics, time
import numpy as np
import jax, jax.numpy as jnp


def build(balance, a):
    from marin.models.transformer import LlamaConfig
    from marin.models.moe import MoEConfig
    from marin.train.trainer import TrainConfig, CharDataConfig, setup_training, device_batch
    from marin.train.optim import OptimizerConfig

    balance, *extra = balance.split("+")  # e.g. quantile+grouped_matmul=ragged: other MoEConfig fields
    kw = {
        k: type(getattr(MoEConfig(), k))(v)
        if not isinstance(getattr(MoEConfig(), k), bool)
        else v in ("1", "true", "True")
        for k, v in (e.split("=") for e in extra)
    }
    moe = (
        None
        if balance == "dense"
        else MoEConfig(n_experts=a.experts, top_k=a.top_k, d_expert=a.d_expert, balance=balance, **kw)
    )
    model = LlamaConfig(
        vocab_size=a.vocab,
        seq_len=a.seq,
        d_model=a.d_model,
        n_layers=a.layers,
        n_heads=a.heads,
        n_kv_heads=a.heads,
        d_ff=a.top_k * a.d_expert,
        moe=moe,
    )
    cfg = TrainConfig(
        model=model,
        data=CharDataConfig(batch_size=a.batch, seq_len=a.seq),
        optimizer=OptimizerConfig(learning_rate=1e-3),
        num_train_steps=1000,
        progress=False,
    )
    setup = setup_training(cfg)
    mesh, state, step = setup.mesh, setup.init_state(), setup.step
    rng = np.random.default_rng(0)
    toks = rng.integers(0, a.vocab, (a.batch, a.seq)).astype(np.int32)
    batch = device_batch(
        {"tokens": toks, "segment_ids": np.ones_like(toks), "loss_mask": np.ones(toks.shape, np.float32)},
        mesh,
        1,
        cfg.mesh.rules,
    )
    return model, step, state, batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-expert", type=int, default=64)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=72)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--balance", default="quantile,switch", help="comma-separated; `+field=value` sets other MoEConfig fields"
    )
    a = ap.parse_args()
    kinds = ["dense"] + a.balance.split(",")
    runs = {}
    for k in kinds:
        model, step, state, batch = build(k, a)
        t = time.perf_counter()
        state, m = step(state, batch)
        jax.device_get(m)
        runs[k] = dict(
            model=model, step=step, state=state, batch=batch, compile_s=time.perf_counter() - t, times=[], cpu=[]
        )
    for _ in range(a.rounds):
        for k in kinds:
            r = runs[k]
            t, c = time.perf_counter(), time.process_time()
            for _ in range(a.steps):
                r["state"], m = r["step"](r["state"], r["batch"])
                jax.device_get(m)  # the trainer reads the metrics every step
            r["times"].append((time.perf_counter() - t) / a.steps * 1e3)
            r["cpu"].append((time.process_time() - c) / a.steps * 1e3)
    dense = statistics.median(runs["dense"]["times"])
    dense_cpu = statistics.median(runs["dense"]["cpu"])
    print(
        f"| model (L={a.layers}, d_model={a.d_model}, E={a.experts} top-{a.top_k}, d_expert={a.d_expert} vs dense d_ff={a.top_k * a.d_expert}, "
        f"batch {a.batch}x{a.seq}) | active matmul params | step ms (median) | vs dense | CPU ms / step | vs dense | compile s |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for k in kinds:
        r = runs[k]
        ms, cpu = statistics.median(r["times"]), statistics.median(r["cpu"])
        name = "dense" if k == "dense" else f"MoE, balance={k.replace('+', ', ')}"
        print(
            f"| {name} | {r['model'].n_matmul_params:,} | {ms:.2f} | {ms / dense:.2f}x | {cpu:.2f} | {cpu / dense_cpu:.2f}x | {r['compile_s']:.1f} |"
        )
    print(f"\ndevice: {jax.devices()[0].device_kind} x{len(jax.devices())}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
