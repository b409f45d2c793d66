"""Serving speed at a real model's shape (issue #20): marin's engine (float32, int8, int4) against `transformers`
`generate` and, when `llama-cpp-python` is installed, llama.cpp, side by side in one run.

Run: .venv/bin/python bench/serve_real.py [--new-tokens 64] [--prompt-len 64] [--concurrent 8] [--rounds 3]
     [--skip transformers] [--host-profile TOKENS]  (cProfile of the engine thread's decode iterations, per mode: the host's share)

The model is the issue's 135M-parameter Llama shape (SmolLM-135M: 30 layers, d_model 576, 9 query / 3 KV heads,
d_ff 1536, vocabulary 49,152, tied embeddings) with random weights (seed 0): greedy decoding with EOS ignored does
no data-dependent work, so speed does not depend on the weights. `transformers` gets the same weights
(`dense_hf_tensors`), and its greedy tokens are compared with ours. Every request generates exactly --new-tokens.
Rows: decode tokens/s at batch 1 (one request, after its first token), aggregate tokens/s for --concurrent requests
submitted together, time to first token for a --prompt-len prompt. The profile rows split one engine token into
the jitted decode step at batch 1 and at --concurrent rows, sampling, and the host's share (the rest). "head"
says how the vocabulary projection is stored (`marin serve`'s default, `--quantize-head auto`, is int8 for
quantized blocks) (`quantize_model(..., head=)`: the tied embedding quantized once, its
lookup gathering dequantized rows; "float32": as before, 113 MB read every step). Every engine is built
first; then --rounds rounds each measure every engine in turn (batch 1, the concurrent requests, TTFT), so a slow
spell of a shared machine lands on all engines alike: the table gives each row's median (batch 1 also its
range). A shared VM's hypervisor can take half of the CPU for minutes at a time (the "steal" of /proc/stat; seen
at 40-55% here), so each measurement records the steal share during it, and the medians use only those under
--max-steal (the table says how many of the rounds that left; all of them, marked *, where none qualified). The
load average is printed: compare ratios within one run, not absolute numbers across runs.

llama.cpp (when `llama-cpp-python` is importable; its rows are skipped with a message otherwise) runs the same
weights: the model is written as a Hugging Face folder with a placeholder byte-level vocabulary of the model's size
(llama.cpp needs one to load; both engines are fed token ids), turned into an F32 GGUF by `write_gguf`, and
quantized to Q4_0 / Q4_1 by llama.cpp's own `llama_model_quantize` (its standard mix: the tied embedding becomes
Q6_K). llama-cpp-python serves one sequence at a time, so its "concurrent" row is the requests one after another,
as `llama-server` with one slot would; TTFT is the prompt's evaluation plus the first greedy pick."""

import argparse, ctypes, dataclasses, functools, inspect, json, os, statistics, tempfile, time
from typing import Any, Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--new-tokens", type=int, default=64)
ap.add_argument("--prompt-len", type=int, default=64)
ap.add_argument("--concurrent", type=int, default=8)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--rounds", type=int, default=3, help="measurements of every engine, interleaved")
ap.add_argument(
    "--max-steal",
    type=float,
    default=0.10,
    help="measurements during which the hypervisor took more of the CPU are left out",
)
ap.add_argument("--skip", default="", help="comma-separated: transformers,int8,int4,head,prefix,llama.cpp")
ap.add_argument("--llama-types", default="F32,Q4_0,Q4_1", help="llama.cpp GGUF types (llama.cpp's own quantizer)")
ap.add_argument("--only-prefix", action="store_true", help="only the prefix-cache rows")
ap.add_argument("--system-len", type=int, default=448, help="the shared system prompt of the prefix-cache rows")
ap.add_argument(
    "--host-profile",
    type=int,
    default=0,
    metavar="TOKENS",
    help="profile the engine thread's decode "
    "iterations over one request of TOKENS tokens (a real tokenizer's decode_text), per mode",
)
args = ap.parse_args()
skip = set(filter(None, args.skip.split(",")))

from _steal import measured
from marin.models.transformer import LlamaConfig, init
from marin.serve import engine as E
from marin.serve.quantize import quantize_model, weight_bytes

CFG = LlamaConfig(
    vocab_size=49152, seq_len=2048, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536, tie_embeddings=True
)
N, P, C = args.new_tokens, args.prompt_len, args.concurrent
MAX_LEN = 512  # the engine's context: prompt + new tokens fit, and the cache is what a server would hold per slot
rng = np.random.default_rng(0)
prompts = [rng.integers(1, CFG.vocab_size, P).tolist() for _ in range(C)]
model = init(CFG, key=jax.random.PRNGKey(0))
contestants, notes = [], []


@dataclasses.dataclass
class Contestant:
    "One engine under test: its measurements (batch-1 tok/s and tokens, concurrent tok/s, TTFT s) as closures."

    label: str
    batch1: Callable
    many: Callable
    ttft: Callable
    weights_mb: float
    engine: Any = None
    results: dict = dataclasses.field(default_factory=lambda: {"batch1": [], "many": [], "ttft": []})
    tokens: list = None


print(f"load average before: {os.getloadavg()}; threads {args.threads}; {CFG.summary()}", flush=True)


def timed(fn, *a, reps=5, **kw):
    out = fn(*a, **kw)
    jax.block_until_ready(out)
    t = time.perf_counter()
    for _ in range(reps):
        out = fn(*a, **kw)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / reps, out


def marin_contestant(label, m):
    "Marin's engine on `m`, compiled for every bucket these measurements meet; its measurements as closures."
    prm = E.SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True)
    eng = E.Engine(m, max_batch=C, max_seq_len=MAX_LEN)
    eng.generate(prompts, prm), eng.generate(prompts[:1], prm)

    def batch1():
        t = time.perf_counter()
        one = eng.generate(prompts[:1], prm)[0]
        return (N - 1) / (time.perf_counter() - t - one.ttft_s), one.tokens

    def many():
        t = time.perf_counter()
        eng.generate(prompts, prm)
        return C * N / (time.perf_counter() - t)

    ttft = lambda: min(eng.generate([prompts[i]], E.SamplingParams(max_tokens=1))[0].ttft_s for i in range(min(3, C)))
    return Contestant(label, batch1, many, ttft, weight_bytes(m) / 2**20, eng)


def quiet(results: list) -> tuple:
    "(median, low, high, how many, all quiet?) of the (value, steal) results under --max-steal; of all if none is."
    values = [v for v, steal in results if steal <= args.max_steal]
    ok = bool(values)
    values = values or [v for v, _ in results]
    return statistics.median(values), min(values), max(values), len(values), ok


def profile_note(c):
    "One batch-1 token of a marin contestant split into the decode step, sampling and the host's share."
    step1, stepc, samp = _profile(c.engine)
    per_tok = 1e3 / quiet(c.results["batch1"])[0]
    notes.append(
        f"{c.label}: one token at batch 1 = {per_tok:.1f} ms (median): decode step {step1 * 1e3:.1f} ms, sampling"
        f" {samp * 1e3:.1f} ms, host {per_tok - (step1 + samp) * 1e3:.1f} ms; decode step at {C} rows {stepc * 1e3:.1f} ms"
    )


def _profile(eng):
    "The jitted decode step alone (batch 1 and C rows, attention over 128 positions) and sampling, on the engine's cache."
    params = inspect.signature(E.decode).parameters
    with_slots = "slots" in params  # older engines decoded every slot
    dtype = {"dtype": eng.dtype} if "dtype" in params else {}
    donate = (4, 5) if with_slots else (3, 4)  # the caches, as the engine donates them
    decode = jax.jit(functools.partial(E.decode, **dtype), static_argnames=("attn_len",), donate_argnums=donate)
    times = []
    for b in (1, C):
        b = b if with_slots else eng.max_batch
        a = [jnp.zeros(b, jnp.int32), jnp.full(b, P, jnp.int32)] + (
            [jnp.arange(b, dtype=jnp.int32)] if with_slots else []
        )

        def step():
            lg, eng.cache_k, eng.cache_v = decode(eng.model, *a, eng.cache_k, eng.cache_v, attn_len=128)
            return lg

        times.append(timed(step)[0])
    b = 1 if with_slots else eng.max_batch
    lg = jax.random.normal(jax.random.PRNGKey(0), (b, CFG.vocab_size))
    if hasattr(eng, "_table"):  # the per-slot table on the device
        return (
            times[0],
            times[1],
            timed(eng._sample, lg, eng._table, jnp.zeros(b, jnp.int32), jnp.zeros(b, jnp.int32))[0],
        )
    t, k, p = eng._params_arrays([None] * b)
    return times[0], times[1], timed(eng._sample, lg, eng._keys([None] * b, [0] * b), t, k, p)[0]


def placeholder_tokenizer(vocab_size: int) -> str:
    "A byte-level BPE `tokenizer.json` with `vocab_size` tokens (the 256 byte symbols, then unreachable fillers)."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["ĠĠ"] = len(vocab)  # one merge: llama.cpp refuses a BPE vocabulary without merges
    vocab.update({f"<filler{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("Ġ", "Ġ")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def host_profile(label, m, n_tokens, top=8):
    """cProfile of the engine thread's decode iterations (`Engine._step`, which calls `_emit`) while one request
    generates `n_tokens`, with a real tokenizer's `decode_text` (the placeholder byte-level BPE below): the top items
    by own time, in ms per token. Waiting for the device shows as the call that blocks (`numpy.asarray` before,
    `device_get` after); the rest is the host's share."""
    import cProfile, pstats
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(placeholder_tokenizer(CFG.vocab_size))
    prof = [cProfile.Profile()]

    class Profiled(E.Engine):
        def _step(self):
            prof[0].enable()
            try:
                return E.Engine._step(self)
            finally:
                prof[0].disable()

    prm = E.SamplingParams(max_tokens=n_tokens, temperature=0.0, ignore_eos=True)
    with Profiled(m, max_batch=C, max_seq_len=MAX_LEN, decode_text=tok.decode) as eng:
        eng.generate(prompts[:1], prm)  # compiled
        prof[0], steps = cProfile.Profile(), eng.stats["decode_steps"]
        t = time.perf_counter()
        c = eng.generate(prompts[:1], prm)[0]
        per_tok = (time.perf_counter() - t - c.ttft_s) / (n_tokens - 1) * 1e3
        steps = eng.stats["decode_steps"] - steps
    st = pstats.Stats(prof[0]).stats  # (file, line, name) -> (calls, prim calls, own time, cumulative, callers)
    total = sum(v[2] for v in st.values()) / steps * 1e3
    items = sorted(st.items(), key=lambda kv: -kv[1][2])[:top]
    name = lambda k: k[2] if k[0] == "~" else f"{os.path.basename(k[0])}:{k[2]}"
    lines = [f"{name(k)} {v[2] / steps * 1e3:.2f} ms ({v[0] / steps:.0f} calls)" for k, v in items]
    notes.append(
        f"host profile, {label}: {per_tok:.1f} ms per token, {total:.1f} ms profiled per decode iteration; top: "
        + "; ".join(lines)
    )
    print(notes[-1], flush=True)


def prefix_rows(m):
    "TTFT of a question after a shared --system-len system prompt that an earlier request brought: reused vs not."
    system = rng.integers(1, CFG.vocab_size, args.system_len).tolist()
    asks = [system + rng.integers(1, CFG.vocab_size, 16).tolist() for _ in range(5)]
    one = E.SamplingParams(max_tokens=1)
    for cached in (False, True):
        with E.Engine(m, max_batch=C, max_seq_len=MAX_LEN, prefix_cache=cached) as eng:
            eng.generate(asks[:1], one), eng.generate(asks[1:2], one)  # the system prompt is in a slot; compiled
            ttft = min(eng.generate([a], one)[0].ttft_s for a in asks[2:])
            notes.append(
                f"prefix cache {'on ' if cached else 'off'}: TTFT {ttft * 1e3:.0f} ms for {len(asks[0])} prompt tokens"
                f" ({eng.stats['prefix_tokens']} reused in all)"
            )


if args.only_prefix:
    prefix_rows(model)
    print("\n".join(notes))
    raise SystemExit
HEAD_ARG = "head" in inspect.signature(quantize_model).parameters  # older trees: include_head (the blocks' mode)


def quantized(mode: str, head: str):
    "The model's blocks quantized to `mode`, its vocabulary projection to `head` ('none': float32)."
    if HEAD_ARG:
        return quantize_model(model, mode, head=head)
    return quantize_model(model, mode, include_head=head != "none")


if args.host_profile:
    for mode in ("none", "int8", "int4"):
        if mode not in skip:
            host_profile("float32" if mode == "none" else mode, quantized(mode, "none"), args.host_profile)
contestants.append(marin_contestant("marin float32", model))
for mode in ("int8", "int4"):
    if mode not in skip:
        contestants.append(marin_contestant(f"marin {mode}, head float32", quantized(mode, "none")))
        if "head" not in skip:  # the vocabulary projection too (llama.cpp's Q4 files quantize it, to Q6_K)
            for head in ("int8", "int4") if mode == "int4" and HEAD_ARG else (mode,):
                contestants.append(marin_contestant(f"marin {mode}, head {head}", quantized(mode, head)))
if "prefix" not in skip:
    prefix_rows(model)

if "transformers" not in skip:
    import torch
    from transformers import LlamaConfig as HFLlamaConfig, LlamaForCausalLM
    from marin.models.hf import dense_hf_tensors

    torch.set_num_threads(args.threads)
    hf = LlamaForCausalLM(
        HFLlamaConfig(
            vocab_size=CFG.vocab_size,
            hidden_size=CFG.d_model,
            intermediate_size=CFG.d_ff,
            num_hidden_layers=CFG.n_layers,
            num_attention_heads=CFG.n_heads,
            num_key_value_heads=CFG.n_kv_heads,
            max_position_embeddings=CFG.seq_len,
            rope_theta=CFG.rope_theta,
            rms_norm_eps=CFG.norm_eps,
            tie_word_embeddings=True,
        )
    ).eval()
    missing = hf.load_state_dict(
        {k: torch.from_numpy(np.asarray(v)) for k, v in dense_hf_tensors(model).items()}, strict=False
    )
    assert not missing.missing_keys or missing.missing_keys == ["lm_head.weight"], missing
    gen = lambda ids, n: hf.generate(torch.tensor(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    with torch.no_grad():
        gen(prompts[:1], 4)

    @torch.no_grad()
    def tf_batch1():
        first = min(timed(gen, prompts[:1], 1, reps=1)[0] for _ in range(2))
        t = time.perf_counter()
        out = gen(prompts[:1], N)
        return (N - 1) / (time.perf_counter() - t - first), out[0, P:].tolist()

    @torch.no_grad()
    def tf_many():
        t = time.perf_counter()
        gen(prompts, N)  # same-length prompts: no padding, one batch
        return C * N / (time.perf_counter() - t)

    tf_ttft = torch.no_grad()(lambda: min(timed(gen, prompts[i : i + 1], 1, reps=1)[0] for i in range(min(3, C))))
    weights_mb = 4 * sum(p.numel() for p in hf.parameters()) / 2**20
    contestants.append(Contestant("transformers float32", tf_batch1, tf_many, tf_ttft, weights_mb))


def write_llama_gguf(m, folder: str) -> str:
    "`m` as an F32 GGUF that llama.cpp loads: a Hugging Face folder with a placeholder vocabulary, then `write_gguf`."
    from marin.models.gguf import write_gguf
    from marin.models.hf import ARCHITECTURES, architecture_for, safetensors_bytes

    arch = architecture_for(m)
    config, tensors = ARCHITECTURES[arch].to_config(m.cfg, arch), ARCHITECTURES[arch].to_tensors(m)
    hf = os.path.join(folder, "hf")
    os.makedirs(hf, exist_ok=True)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(hf, "model.safetensors"), "wb") as f:
        f.write(safetensors_bytes(tensors))
    with open(os.path.join(hf, "tokenizer.json"), "w") as f:
        f.write(placeholder_tokenizer(config["vocab_size"]))
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False}, f)
    return write_gguf(hf, os.path.join(folder, "F32.gguf"), "F32")


def llama_quantize(llama_cpp, src: str, qtype: str) -> str:
    "llama.cpp's own quantization of the F32 file `src` to `qtype` (its `llama-quantize`, through the C API)."
    dst = src.replace("F32.gguf", f"{qtype}.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = args.threads
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize to {qtype} failed")
    return dst


def llama_generate(llm, prompt: list[int], n: int):
    "(tokens, time to first token, wall) of `n` greedy tokens after `prompt`, from an empty context."
    llm.reset()
    out, t = [], time.perf_counter()
    for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(tok)
        if len(out) == 1:
            ttft = time.perf_counter() - t
        if len(out) == n:
            return out, ttft, time.perf_counter() - t


def llama_cpp_contestants(m):
    try:
        import llama_cpp
    except ImportError:
        notes.append(
            "llama.cpp rows SKIPPED: llama-cpp-python is not installed (it is a bench-only dependency; "
            '`pip install llama-cpp-python` builds llama.cpp from source, ~10 min; CMAKE_ARGS="-DGGML_NATIVE=ON")'
        )
        return
    folder = tempfile.mkdtemp(prefix="serve_real_gguf_")
    f32 = write_llama_gguf(m, folder)
    for qtype in filter(None, args.llama_types.split(",")):
        path = f32 if qtype == "F32" else llama_quantize(llama_cpp, f32, qtype)
        llm = llama_cpp.Llama(
            path, n_ctx=MAX_LEN, n_batch=MAX_LEN, n_threads=args.threads, n_threads_batch=args.threads, verbose=False
        )
        llama_generate(llm, prompts[0], 4)  # warm-up

        def batch1(llm=llm):
            one, first, wall1 = llama_generate(llm, prompts[0], N)  # decode speed: after this call's first token
            return (N - 1) / (wall1 - first), one

        def many(llm=llm):
            t = time.perf_counter()
            for p in prompts:
                llama_generate(llm, p, N)
            return C * N / (time.perf_counter() - t)

        ttft = lambda llm=llm: min(llama_generate(llm, prompts[i], 1)[1] for i in range(min(3, C)))
        contestants.append(Contestant(f"llama.cpp {qtype}", batch1, many, ttft, os.path.getsize(path) / 2**20, llm))


if "llama.cpp" not in skip:
    llama_cpp_contestants(model)


for r in range(args.rounds):  # interleaved: every engine once per round
    for c in contestants:
        (tok_s, c.tokens), steal = measured(c.batch1)
        c.results["batch1"].append((tok_s, steal))
        c.results["many"].append(measured(c.many))
        c.results["ttft"].append(measured(c.ttft))
    print(
        f"round {r + 1}: batch-1 tok/s (steal): "
        + ", ".join(
            f"{c.label} {c.results['batch1'][-1][0]:.1f} ({c.results['batch1'][-1][1]:.0%})" for c in contestants
        ),
        flush=True,
    )
ours = contestants[0].tokens
for c in contestants:
    if c.label.startswith("marin"):
        profile_note(c)
    elif c.label.startswith("transformers"):
        same = c.tokens[:16] == ours[:16]
        notes.append(f"transformers' first 16 greedy tokens {'equal' if same else 'DIFFER from'} marin float32's")
    else:
        same = next((i for i, (a, b) in enumerate(zip(c.tokens, ours)) if a != b), min(len(c.tokens), len(ours)))
        notes.append(f"{c.label}: greedy tokens equal marin float32's for the first {same} of {N}")
rows = [
    (c.label, quiet(c.results["batch1"]), quiet(c.results["many"]), quiet(c.results["ttft"]), c.weights_mb)
    for c in contestants
]
print(f"\nload average after: {os.getloadavg()}")
print(
    f"{args.rounds} rounds; medians of the rounds with at most {args.max_steal:.0%} steal (how many: [n]; *: none was)"
)
print(
    f"| engine | decode tok/s, batch 1 (range) [n] | {C} requests, aggregate tok/s [n] | TTFT, {P}-token prompt [n] |"
    " weights MiB |"
)
print("|---|---|---|---|---|")
n = lambda q: f"[{q[3]}{'' if q[4] else '*'}]"
for label, b1, many, ttft, mb in rows:
    print(
        f"| {label} | {b1[0]:.1f} ({b1[1]:.1f}-{b1[2]:.1f}) {n(b1)} | {many[0]:.1f} {n(many)} | {ttft[0] * 1e3:.0f} ms"
        f" {n(ttft)} | {mb:.0f} |"
    )
base = {r[0]: [r[0], r[1][0], r[2][0], r[3][0] * 1e3] for r in rows}
if "transformers float32" in base:
    print(f"\nmarin float32 / transformers, batch 1: {base['marin float32'][1] / base['transformers float32'][1]:.2f}x")
for q in [r[0] for r in rows if r[0].startswith("llama.cpp Q4")]:
    for mine in [r[0] for r in rows if r[0].startswith("marin")]:
        a, b = base[mine], base[q]
        print(
            f"{mine} / {q}: batch 1 {a[1] / b[1]:.2f}x (goal >= 0.5 for int8/int4), {C} requests {a[2] / b[2]:.2f}x"
            f" (goal >= 1), TTFT {a[3] / b[3]:.2f}x (goal <= 2)"
        )
print("\n" + "\n".join(notes))
for c in contestants:  # the engines' threads and llama.cpp's models, before the interpreter's teardown
    if c.engine is not None:
        c.engine.close()
