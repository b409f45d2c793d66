"""Serving benchmarks on one exported model: marin's engine vs `transformers` `generate` (decode tokens/s at batch 1
and with 8 concurrent requests, time to first token), and the bits-per-byte cost of int8 / int4 weight-only
quantization.

Run: MARIN_PREFIX=/tmp/marin_bench .venv/bin/python bench/serve_bench.py [--steps 300] [--new-tokens 128] [--moe]
Trains (or reuses, cached by the executor) a character-level Llama on tinyshakespeare, exports it to the HF layout,
then loads that same folder into both engines. Both run float32 on the CPU, greedy, with every request forced to
generate exactly --new-tokens tokens (ignore_eos / min_new_tokens). With --moe the model is a mixture of experts
(4 experts of width 256, top-2, switch balancing) exported as MixtralForCausalLM, and the exported model's logits are
compared with `transformers`' on held-out text. Quality: bits per byte on the held-out 10% of
tinyshakespeare (every character is one byte), non-overlapping windows of the model's context."""

import argparse, math, os, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MARIN_TRACKER", "disabled")
import jax, jax.numpy as jnp, numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--new-tokens", type=int, default=128)
ap.add_argument("--eval-windows", type=int, default=48)
ap.add_argument("--moe", action="store_true", help="a mixture-of-experts model, exported as Mixtral")
args = ap.parse_args()

from marin.core import storage
from marin.core.executor import Executor
from marin.models.transformer import LlamaConfig, forward
from marin.train.optim import OptimizerConfig
from marin.train.checkpoint import CheckpointConfig
from marin.train.trainer import CharDataConfig, TrainConfig, train_step
from marin.serve.hf import ExportConfig, export_step, import_hf
from marin.serve.engine import Engine, SamplingParams
from marin.serve.quantize import Int4Weight, Int8Weight, quantize_model, weight_bytes

from marin.models.moe import MoEConfig

MODEL = LlamaConfig(
    vocab_size=65,
    seq_len=256,
    d_model=192,
    n_layers=4,
    n_heads=6,
    n_kv_heads=2,
    d_ff=512,
    moe=MoEConfig(n_experts=4, top_k=2, d_expert=256, balance="switch") if args.moe else None,
)
TAG = "serve-moe" if args.moe else "serve"
tr = train_step(
    TrainConfig(
        model=MODEL,
        data=CharDataConfig(batch_size=8, seq_len=256),
        num_train_steps=args.steps,
        progress=False,
        optimizer=OptimizerConfig(learning_rate=2e-3, warmup=30),
        checkpoint=CheckpointConfig(every=0),
    ),
    f"bench/{TAG}-train",
)
exp = export_step(ExportConfig(checkpoint=tr), f"bench/{TAG}-export")
ex = Executor(verbose=False)
t0 = time.perf_counter()
ex.run([tr, exp])
print(f"train+export (cached if already done): {time.perf_counter() - t0:.1f}s")
path = ex.output_path(exp)
model, _ = import_hf(path)
vocab = storage.read_json(storage.join(ex.output_path(tr), "vocab.json"))
text = open(CharDataConfig().resolved_path).read()
table = {c: i for i, c in enumerate(vocab)}
val = np.array([table[c] for c in text[int(len(text) * 0.9) :]], np.int32)
N = args.new_tokens
prompts = [
    [table[c] for c in s]
    for s in (
        "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the",
        "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\nDeny thy father",
        "HAMLET:\nTo be, or not to be, that is the question:\nWhether 'tis",
        "KING RICHARD III:\nNow is the winter of our discontent\nMade glorious",
        "MARK ANTONY:\nFriends, Romans, countrymen, lend me your ears;\nI come",
        "PROSPERO:\nWe are such stuff as dreams are made on, and our",
        "MACBETH:\nTomorrow, and tomorrow, and tomorrow,\nCreeps in this",
        "PORTIA:\nThe quality of mercy is not strain'd,\nIt droppeth as",
    )
]
P = min(len(p) for p in prompts)
prompts = [p[:P] for p in prompts]  # equal lengths: no padding in HF's batch


# ---- marin engine ------------------------------------------------------------------------------------------
def marin_run(engine, batch):
    params = SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True)
    t = time.perf_counter()
    outs = engine.generate(prompts[:batch], params)
    dt = time.perf_counter() - t
    assert all(len(o.tokens) == N for o in outs)
    return dt, outs


rows = {}
eng = Engine(model, max_batch=8)
marin_run(eng, 1)
marin_run(eng, 8)  # compile every bucket once
ttft = []
for _ in range(5):
    h = eng.submit(prompts[0], SamplingParams(max_tokens=1, temperature=0.0))
    ttft.append(h.result().ttft_s)
dt1, o1 = marin_run(eng, 1)
dt8, o8 = marin_run(eng, 8)
rows["marin"] = (N / dt1, 8 * N / dt8, float(np.median(ttft)))
marin_greedy = o1[0].tokens
eng.close()

# ---- transformers ------------------------------------------------------------------------------------------
import torch, transformers

torch.manual_seed(0)
hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
_probe = np.asarray(val[: 2 * MODEL.seq_len].reshape(2, MODEL.seq_len))
with torch.no_grad():
    _theirs = hf(torch.tensor(_probe)).logits.numpy()
logit_diff = float(np.abs(np.asarray(forward(model, jnp.asarray(_probe))) - _theirs).max())


def hf_run(batch, new=N):
    ids = torch.tensor(prompts[:batch])
    t = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    return time.perf_counter() - t, out[:, P:]


hf_run(1, 4)
hf_run(8, 4)
ttft = [hf_run(1, 1)[0] for _ in range(5)]
dt1, h1 = hf_run(1)
dt8, _ = hf_run(8)
rows["transformers"] = (N / dt1, 8 * N / dt8, float(np.median(ttft)))
agree = int(np.argmax(np.asarray(h1[0].tolist()) != np.asarray(marin_greedy))) if h1[0].tolist() != marin_greedy else N

print(f"\nModel: {MODEL.summary()}, trained {args.steps} steps on tinyshakespeare; exported to {path}")
print(
    f"Greedy, float32, CPU ({os.cpu_count()} cores), prompt {P} tokens, {N} new tokens per request. "
    f"Greedy continuations of both engines agree on the first {agree} of {N} tokens. {type(hf).__name__}: max |logit diff| "
    f"ours vs transformers on 2 x {MODEL.seq_len} held-out tokens {logit_diff:.2e}.\n"
)
print("| engine | decode tok/s, batch 1 | decode tok/s, 8 concurrent | time to first token |")
print("|---|---|---|---|")
for k, (a, b, c) in rows.items():
    print(f"| {k} | {a:,.0f} | {b:,.0f} | {c * 1000:.1f} ms |")
print(
    f"| marin / transformers | {rows['marin'][0] / rows['transformers'][0]:.2f}x | {rows['marin'][1] / rows['transformers'][1]:.2f}x | "
    f"{rows['transformers'][2] / rows['marin'][2]:.2f}x faster |"
)


# ---- quantization quality ----------------------------------------------------------------------------------
def dequantized(qm):
    return jax.tree.map(
        lambda w: w.dequantize() if isinstance(w, (Int8Weight, Int4Weight)) else w,
        qm,
        is_leaf=lambda x: isinstance(x, (Int8Weight, Int4Weight)),
    )


S = MODEL.seq_len
n_win = min(args.eval_windows, len(val) // S)
windows = jnp.asarray(val[: n_win * S].reshape(n_win, S))
fwd = jax.jit(forward)


def bpb(m):
    tot = 0.0
    for i in range(0, n_win, 8):
        w = windows[i : i + 8]
        lp = jax.nn.log_softmax(fwd(m, w), -1)[:, :-1]
        tot += float(-jnp.take_along_axis(lp, w[:, 1:, None], -1).sum())
    return tot / (n_win * (S - 1)) / math.log(2)


base = bpb(model)
print(f"\nBits per byte on {n_win} x {S} held-out characters (tinyshakespeare val):\n")
print("| weights | block weight bytes | all weight bytes | bits/byte | vs float32 |")
print("|---|---|---|---|---|")
from marin.serve.quantize import BLOCK_MATMULS, EXPERT_MATMULS


def block_bytes(m):
    "Bytes of the weights quantization applies to (block matmuls; experts for MoE), float or quantized."
    parts = [getattr(m.blocks, n) for n in BLOCK_MATMULS] + [
        getattr(m.blocks.moe, n) for n in EXPERT_MATMULS if m.blocks.moe is not None
    ]
    return sum(weight_bytes(x) for x in parts if x is not None)


print(f"| float32 | {block_bytes(model):,} | {weight_bytes(model):,} | {base:.5f} | — |")
for mode, gs in (("int8", 0), ("int4", 32), ("int4", 64)):
    qm = quantize_model(model, mode, group_size=gs or 128)
    blk = block_bytes(qm)
    b = bpb(dequantized(qm))
    name = mode if mode == "int8" else f"int4, group {gs}"
    print(f"| {name} | {blk:,} | {weight_bytes(qm):,} | {b:.5f} | {100 * (b / base - 1):+.3f}% |")
