"""Training memory and step time of LoRA against full fine-tuning of the same model, side by side.

    .venv/bin/python bench/lora_memory.py            # every variant, each in its own process; a Markdown table
    .venv/bin/python bench/lora_memory.py --steps 5  # timed steps per variant (after one warm-up step)

One ~34M-parameter Llama (8 layers, d_model 512, vocab 8192) trained with the trainer's own jitted step
(`setup_training`), once with all weights trained and once per LoRA configuration. Per variant: XLA's buffer
assignment of the compiled step (arguments + outputs + temporaries - donated, the peak the runtime allocates; on CPU
the most faithful measured peak), the bytes of the trained state (what a checkpoint holds: parameters or adapter,
plus optimizer moments), the process's peak RSS, and the time of a step (the fastest step's wall time, and the median CPU-seconds a step
spends in all of XLA's threads, which a shared machine disturbs less). Each variant runs in a fresh
process so that one's peak RSS and compile caches do not leak into another's."""

import argparse, json, os, resource, statistics, subprocess, sys, time

os.environ.setdefault("MARIN_TRACKER", "disabled")
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
VARIANTS = {  # name -> LoraConfig kwargs (None: full fine-tuning)
    "full fine-tuning": None,
    "LoRA r=8, q_proj+v_proj": dict(rank=8, alpha=16.0, target_modules=("q_proj", "v_proj")),
    "LoRA r=16, all 7 projections": dict(rank=16, alpha=32.0, target_modules=ALL),
}
BATCH, SEQ = 4, 256


def measure(name: str, steps: int) -> dict:
    import jax, jax.numpy as jnp
    from marin.models.lora import LoraConfig
    from marin.models.transformer import LlamaConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training

    model = LlamaConfig(vocab_size=8192, seq_len=SEQ, d_model=512, n_layers=8, n_heads=8, n_kv_heads=8, d_ff=1408)
    kw = VARIANTS[name]
    cfg = TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=8192, batch_size=BATCH, seq_len=SEQ),
        num_train_steps=100,
        lora=None if kw is None else LoraConfig(**kw),
        progress=False,
    )
    setup = setup_training(cfg)
    state = setup.init_state()
    if cfg.lora is not None:
        setup.load_base()
    batch = setup.batch(0)
    t = time.perf_counter()
    compiled = setup.step.lower(state, batch, setup.frozen).compile()
    compile_s = time.perf_counter() - t
    ma = compiled.memory_analysis()
    peak = ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes
    nbytes = lambda tree: int(sum(x.nbytes for x in jax.tree.leaves(tree)))
    trained, frozen = nbytes((state.params, state.opt_state)), nbytes(setup.frozen)
    n_trained = int(sum(x.size for x in jax.tree.leaves(state.params)))
    times, cpu = [], []
    for i in range(steps + 1):
        b = setup.batch(i)
        t, c = time.perf_counter(), time.process_time()
        state, m = compiled(state, b, setup.frozen)
        jax.block_until_ready(m["loss"])
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return dict(
        name=name,
        model=model.summary(),
        n_trained=n_trained,
        trained_state_mib=trained / 2**20,
        frozen_mib=frozen / 2**20,
        xla_peak_mib=peak / 2**20,
        xla_temp_mib=ma.temp_size_in_bytes / 2**20,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10,
        step_s=min(times[1:]),  # the least-disturbed step: on a shared machine the others wait for cores
        step_cpu_s=statistics.median(cpu[1:]),  # CPU-seconds of all XLA threads: less sensitive to sharing
        compile_s=compile_s,
        loss=float(m["loss"]),
        device=jax.devices()[0].device_kind,
        jax=jax.__version__,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", default="")
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.steps)))
        return
    rows = []
    for name in VARIANTS:
        r = subprocess.run(
            [sys.executable, __file__, "--one", name, "--steps", str(a.steps)], capture_output=True, text=True
        )
        if r.returncode:
            sys.exit(f"{name} failed:\n{r.stderr[-3000:]}")
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr, flush=True)
    full = rows[0]
    print(f"\nModel: {full['model']}; batch {BATCH} x {SEQ} tokens; jax {full['jax']}, {full['device']}\n")
    print(
        "| variant | trained params | trained state (MiB) | frozen base (MiB) | XLA step peak (MiB) | peak RSS (MiB) "
        "| step, wall (s) | step, CPU (s) | peak vs full | step CPU vs full |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['n_trained']:,} | {r['trained_state_mib']:.1f} | {r['frozen_mib']:.1f} "
            f"| {r['xla_peak_mib']:.1f} | {r['peak_rss_mib']:.0f} | {r['step_s']:.2f} | {r['step_cpu_s']:.2f} "
            f"| {r['xla_peak_mib'] / full['xla_peak_mib']:.2f}x | {r['step_cpu_s'] / full['step_cpu_s']:.2f}x |"
        )


if __name__ == "__main__":
    main()
