"""The serving engine's decode step and prefill, and the training forward (the scorer's path), of two checkouts in ONE
process, interleaved call by call: a slow spell of a shared machine lands on both sides alike (issue #51 item 1:
"same serving speed ... before/after, same process"). The other checkout is copied as a package `marin_base`
(every `marin.` import rewritten), so both live side by side; each side quantizes with its own code.

Run: git worktree add /tmp/base <commit>
     .venv/bin/python bench/engine_ab.py --base /tmp/base [--reps 20] [--modes none,int8,int4]

The model is bench/serve_real.py's SmolLM-135M shape (30 layers, d_model 576, 9/3 heads, vocabulary 49,152, tied),
random weights. Rows: the jitted decode step at batch 1 and at 8 rows (attention over 128 cache positions), the
prefill of a 64-token prompt, and `forward` with `hidden_only` on [4, 64] tokens (what the scorer runs): median
milliseconds of each side and the ratio after/before; plus the largest logit difference between the sides."""

import argparse, functools, os, pathlib, re, shutil, statistics, sys, tempfile, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ap = argparse.ArgumentParser()
ap.add_argument("--base", required=True, help="a checkout (git worktree) of the commit to compare against")
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--modes", default="none,int8,int4")
args = ap.parse_args()

pkg = pathlib.Path(tempfile.mkdtemp(prefix="marin-ab-"))
shutil.copytree(pathlib.Path(args.base) / "marin", pkg / "marin_base")
for f in (pkg / "marin_base").rglob("*.py"):
    f.write_text(re.sub(r"\bmarin\.", "marin_base.", f.read_text()))
sys.path.insert(0, str(pkg))

import importlib
import jax, jax.numpy as jnp, numpy as np

sides = {}
for name, root in (("before", "marin_base"), ("after", "marin")):
    sides[name] = {
        m: importlib.import_module(f"{root}.{m}") for m in ("models.transformer", "serve.engine", "serve.quantize")
    }

T = sides["after"]["models.transformer"]
CFG_KW = dict(vocab_size=49152, seq_len=2048, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536,
              tie_embeddings=True)  # fmt: skip
CFG = T.LlamaConfig(**CFG_KW)
for s in sides:  # each side's own classes (a model is a pytree of its checkout's types), the same arrays
    TT = sides[s]["models.transformer"]
    sides[s]["model"] = TT.init(TT.LlamaConfig(**CFG_KW), key=jax.random.PRNGKey(0))
model = sides["after"]["model"]
A, B, P = 128, 8, 64
print(f"load average before: {os.getloadavg()}; {CFG.summary()}", flush=True)


def hidden_of(TT, m, t):
    "The final hidden states: `hidden_states` where the checkout has it, else `forward(..., hidden_only=True)` (before)."
    return TT.hidden_states(m, t)[0] if hasattr(TT, "hidden_states") else TT.forward(m, t, hidden_only=True)


def programs(side, mode):
    E, Q, TT = side["serve.engine"], side["serve.quantize"], side["models.transformer"]
    m = side["model"] if mode == "none" else Q.quantize_model(side["model"], mode, group_size=32)
    dec = jax.jit(functools.partial(E.decode, dtype=jnp.float32), static_argnames=("attn_len",), donate_argnums=(4, 5))
    pre = jax.jit(functools.partial(E.prefill, dtype=jnp.float32), donate_argnums=(3, 4))
    shape = (CFG.n_layers, B, 256, CFG.n_kv_heads, CFG.head_size)
    state = {"c": (jnp.zeros(shape), jnp.zeros(shape))}

    def decode(rows):
        a = (jnp.zeros(rows, jnp.int32), jnp.full(rows, P, jnp.int32), jnp.arange(rows, dtype=jnp.int32))
        lg, *state["c"] = dec(m, *a, *state["c"], attn_len=A)
        return lg

    def prefill():
        toks = jnp.arange(P, dtype=jnp.int32) % CFG.vocab_size
        lg, *state["c"] = pre(m, toks, P, *state["c"], 0)
        return lg

    fwd = jax.jit(lambda m, t: hidden_of(TT, m, t))
    toks = (jnp.arange(4 * 64, dtype=jnp.int32) * 7 % CFG.vocab_size).reshape(4, 64)
    calls = {
        "decode, batch 1": lambda: decode(1),
        f"decode, {B} rows": lambda: decode(B),
        f"prefill, {P} tokens": prefill,
    }
    if mode == "none":
        calls["forward (scorer), [4, 64]"] = lambda: fwd(m, toks)
    return calls


rows = []
for mode in args.modes.split(","):
    progs = {s: programs(sides[s], mode) for s in sides}
    for label in progs["after"]:
        outs = {s: jax.block_until_ready(progs[s][label]()) for s in sides}  # compile, and the outputs to compare
        diff = float(jnp.abs(outs["after"].astype(jnp.float32) - outs["before"].astype(jnp.float32)).max())
        times = {s: [] for s in sides}
        for _ in range(args.reps):
            for s in sides:  # interleaved call by call
                t = time.perf_counter()
                jax.block_until_ready(progs[s][label]())
                times[s].append(time.perf_counter() - t)
        med = {s: statistics.median(v) * 1e3 for s, v in times.items()}
        rows.append((mode, label, med["before"], med["after"], med["after"] / med["before"], diff))
        print(rows[-1], flush=True)


def compiled_size(f, *a):
    "(XLA's flop count, bytes accessed, instructions) of `f` compiled for `a`: the work, independent of the machine's load."
    c = jax.jit(f).lower(*a).compile()
    ca = c.cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    return int(ca["flops"]), int(ca["bytes accessed"]), sum(" = " in line for line in c.as_text().splitlines())


z = jnp.zeros((CFG.n_layers, B, 256, CFG.n_kv_heads, CFG.head_size))
one = (jnp.zeros(1, jnp.int32), jnp.full(1, P, jnp.int32), jnp.zeros(1, jnp.int32))
for s in sides:
    E, TT = sides[s]["serve.engine"], sides[s]["models.transformer"]
    fwd = compiled_size(lambda m, t: hidden_of(TT, m, t), sides[s]["model"], jnp.zeros((4, 64), jnp.int32))
    dec = compiled_size(lambda m, *x: E.decode(m, *x, z, z, A), sides[s]["model"], *one)
    print(f"{s}: forward [4, 64] flops, bytes, instructions {fwd}; decode batch 1 {dec}")
print(f"load average after: {os.getloadavg()}")
print("| weights | call | before ms | after ms | after / before | max abs diff of outputs |")
print("|---|---|---|---|---|---|")
for mode, label, b, a, r, d in rows:
    print(f"| {mode} | {label} | {b:.1f} | {a:.1f} | {r:.3f} | {d:.1e} |")
