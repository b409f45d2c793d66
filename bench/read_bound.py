"""How fast can one float32 decode step read its weights here? The matrix part of a batch-1 step, alone, by several
readers in one process (#20: "float32 >= 2x transformers at batch 1").

Run: .venv/bin/python bench/read_bound.py [--blocks 7] [--reps 5] [--threads 2]

At batch 1 a decode step reads every weight once and does two flops per weight read, so it is bound by memory
bandwidth, not by arithmetic. This bench builds `bench/serve_real.py`'s SmolLM-135M matrices in float32 (30 layers
x q, k, v, o, gate, up, down, and the 576 x 49,152 tied head: 134.5M weights, 538 MB; random values) and passes one
activation row through every one of them, as a decode step does without its attention, norms and sampling. Readers:

- `marin kernel`: `f32_rowvec` (nbs/22b, what `qmatmul` runs on a CPU), all matrices in one jitted function,
  chained (each product's result feeds, negligibly, the next one's input, so XLA cannot run them side by side);
- `XLA dot`: the same function with `x @ w` (XLA:CPU's own dot);
- `torch F.linear`: the nn.Linear layout [F, D], PyTorch's CPU gemv, which `transformers` runs;
- `numpy matmul`: the [D, F] layout through numpy's BLAS;
- `torch sum`: the same bytes summed as one flat buffer, a read with no matrix structure at all (a STREAM-like
  read bound for the machine).

Blocks interleave the readers; the table gives each reader's median ms per pass, the bandwidth that implies, the
decode tokens/s it would allow if nothing else took time, and the ratio to torch's F.linear. The hypervisor's steal
share during the run and the load average are printed."""

import argparse, os, statistics, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np, torch

from _steal import measured
from marin.kernels.cpu_rowvec import f32_rowvec, rowvec_available

ap = argparse.ArgumentParser()
ap.add_argument("--blocks", type=int, default=7)
ap.add_argument("--reps", type=int, default=5, help="passes per reader per block")
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()
assert rowvec_available(), "the kernel does not run here: no C++ compiler, or not the CPU backend"
torch.set_num_threads(args.threads)

D, F_MLP, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
SHAPES = [(D, D), (D, KV), (D, KV), (D, D), (D, F_MLP), (D, F_MLP), (F_MLP, D)] * LAYERS + [(D, VOCAB)]
rng = np.random.default_rng(0)
mats = [rng.standard_normal(s, dtype=np.float32) * 0.02 for s in SHAPES]
n_bytes = sum(m.nbytes for m in mats)
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


torch_ws = [torch.from_numpy(np.ascontiguousarray(m.T)) for m in mats]  # nn.Linear's [F, D]
torch_xs = {d: torch.from_numpy(x) for d, x in xs.items()}
flat = torch.from_numpy(np.concatenate([m.ravel() for m in mats]))


def torch_linear():
    with torch.no_grad():
        return [torch.nn.functional.linear(torch_xs[w.shape[1]], w) for w in torch_ws]


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
    return out


blocks, steal = measured(lambda: [block() for _ in range(args.blocks)])
print(f"load average after: {os.getloadavg()}; steal share during the blocks: {steal:.0%}")
anchor = statistics.median(b["torch F.linear"] for b in blocks)
print("| reader | ms per pass (median, range) | GB/s | tok/s if nothing else took time | vs torch F.linear |")
print("|---|---:|---:|---:|---:|")
for name in READERS:
    ms = [b[name] for b in blocks]
    med = statistics.median(ms)
    print(
        f"| {name} | {med:.1f} ({min(ms):.1f}-{max(ms):.1f}) | {n_bytes / med / 1e6:.1f} | {1e3 / med:.1f} |"
        f" {anchor / med:.2f}x |"
    )
