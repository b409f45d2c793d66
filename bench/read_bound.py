"""How fast can one float32 decode step read its weights here? The matrix part of a batch-1 step, alone, by several
readers in one process (#20: "float32 >= 2x transformers at batch 1").

Run: .venv/bin/python bench/read_bound.py [--blocks 7] [--reps 5] [--threads 2]

At batch 1 a decode step reads every weight once and does two flops per weight read, so it is bound by memory
bandwidth, not by arithmetic. This bench builds `bench/serve_real.py`'s SmolLM-135M as a `transformers`
`LlamaForCausalLM` in float32 (random init; 30 layers x q, k, v, o, gate, up, down, and the 576 x 49,152 tied head:
134.5M weights, 538 MB) and passes one activation row through every one of its matrices, as a decode step does
without its attention, norms and sampling. Readers:

- `marin kernel`: `f32_rowvec` (nbs/22b, what `qmatmul` runs on a CPU), all matrices in one jitted function,
  chained (each product's result feeds, negligibly, the next one's input, so XLA cannot run them side by side);
- `XLA dot`: the same function with `x @ w` (XLA:CPU's own dot);
- `torch F.linear`: the nn.Linear layout [F, D], PyTorch's CPU gemv, which `transformers` runs;
- `numpy matmul`: the [D, F] layout through numpy's BLAS;
- `torch sum`: the same bytes summed as one flat buffer, a read with no matrix structure at all (a STREAM-like
  read bound for the machine).

Beside them, the same blocks time `transformers`' own greedy decoding of that model at batch 1 (ms per token after
the first, a 64-token prompt), so the run says what "2x transformers" asks in ms per token, and whether any reader
here reads the matrices alone that fast.

Blocks interleave the readers; the table gives each reader's median ms per pass, the bandwidth that implies, the
decode tokens/s it would allow if nothing else took time, and the ratio to torch's F.linear. The hypervisor's steal
share during the run and the load average are printed."""

import argparse, os, statistics, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np, torch
from transformers import LlamaConfig as HFLlamaConfig, LlamaForCausalLM

from _steal import measured
from marin.kernels.cpu_rowvec import f32_rowvec, rowvec_available

ap = argparse.ArgumentParser()
ap.add_argument("--blocks", type=int, default=7)
ap.add_argument("--reps", type=int, default=5, help="passes per reader per block")
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()
assert rowvec_available(), "the kernel does not run here: no C++ compiler, or not the CPU backend"
torch.set_num_threads(args.threads)

D, F_MLP, LAYERS, VOCAB, PROMPT, NEW = 576, 1536, 30, 49152, 64, 33
torch.manual_seed(0)
hf = LlamaForCausalLM(
    HFLlamaConfig(
        vocab_size=VOCAB,
        hidden_size=D,
        intermediate_size=F_MLP,
        num_hidden_layers=LAYERS,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
).eval()
linears = [m.weight for m in hf.modules() if isinstance(m, torch.nn.Linear) and m.weight is not hf.lm_head.weight]
torch_ws = [w.detach() for w in linears] + [hf.model.embed_tokens.weight.detach()]  # [F, D]; the tied head last
assert len(torch_ws) == 7 * LAYERS + 1
mats = [np.ascontiguousarray(w.numpy().T) for w in torch_ws]  # [D, F]
n_bytes = sum(m.nbytes for m in mats)
rng = np.random.default_rng(0)
xs = {d: rng.standard_normal((1, d), dtype=np.float32) for d in (D, F_MLP)}
print(f"load average before: {os.getloadavg()}; threads {args.threads}; {len(mats)} matrices, {n_bytes / 1e6:.0f} MB")


def jitted(product):
    """One jitted pass: every matrix times its activation row, in order, as a decode step's chain of layers: each
    product's first output nudges the next product's input, so none runs before the one before it."""

    def chain(xd, xf, ws):
        firsts = []
        for w in ws:
            firsts.append(product(xd if w.shape[0] == D else xf, w)[0, 0])
            xd, xf = xd + 1e-30 * firsts[-1], xf + 1e-30 * firsts[-1]
        return jnp.stack(firsts)

    fn = jax.jit(chain)
    xd, xf, ws = jnp.asarray(xs[D]), jnp.asarray(xs[F_MLP]), [jnp.asarray(m) for m in mats]
    return lambda: fn(xd, xf, ws).block_until_ready()


torch_xs = {d: torch.from_numpy(x) for d, x in xs.items()}
flat = torch.from_numpy(np.concatenate([m.ravel() for m in mats]))


def torch_linear():
    with torch.no_grad():
        return [torch.nn.functional.linear(torch_xs[w.shape[1]], w) for w in torch_ws]


prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(0))


@torch.no_grad()
def transformers_token():
    "transformers' ms per decoded token at batch 1: NEW tokens less the first, over NEW - 1 (per pass, in ms)."
    gen = lambda n: hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    t = time.perf_counter()
    gen(1)
    first = time.perf_counter() - t
    t = time.perf_counter()
    gen(NEW)
    return (time.perf_counter() - t - first) / (NEW - 1)


READERS = {
    "marin kernel (f32_rowvec)": jitted(lambda x, w: f32_rowvec(x, w)),
    "XLA dot": jitted(lambda x, w: x @ w),
    "torch F.linear": torch_linear,
    "numpy matmul": lambda: [xs[m.shape[0]] @ m for m in mats],
    "torch sum (flat read)": lambda: float(flat.sum()),
}
ref = np.stack([(xs[m.shape[0]] @ m)[0, 0] for m in mats])
np.testing.assert_allclose(np.asarray(READERS["marin kernel (f32_rowvec)"]()), ref, rtol=1e-4, atol=1e-5)
for fn in READERS.values():
    fn()  # compile and warm


def block():
    out = {}
    for name, fn in READERS.items():
        t = time.perf_counter()
        for _ in range(args.reps):
            fn()
        out[name] = (time.perf_counter() - t) / args.reps * 1e3
    out[TF] = statistics.median(transformers_token() for _ in range(2)) * 1e3
    return out


TF = "transformers generate, batch 1 (ms per decoded token)"
transformers_token()  # warm


blocks, steal = measured(lambda: [block() for _ in range(args.blocks)])
print(f"load average after: {os.getloadavg()}; steal share during the blocks: {steal:.0%}")
anchor = statistics.median(b["torch F.linear"] for b in blocks)
print("| reader | ms per pass (median, range) | GB/s | tok/s if nothing else took time | vs torch F.linear |")
print("|---|---:|---:|---:|---:|")
for name in [*READERS, TF]:
    ms = [b[name] for b in blocks]
    med = statistics.median(ms)
    print(
        f"| {name} | {med:.1f} ({min(ms):.1f}-{max(ms):.1f}) | {n_bytes / med / 1e6:.1f} | {1e3 / med:.1f} |"
        f" {anchor / med:.2f}x |"
    )
tf = statistics.median(b[TF] for b in blocks)
best = min(READERS, key=lambda n: statistics.median(b[n] for b in blocks))
print(
    f"2x transformers at batch 1 is {tf / 2:.1f} ms per token, everything included; the fastest reader here ({best})"
    f" takes {statistics.median(b[best] for b in blocks):.1f} ms for the matrices alone"
)
