"""Shard-writer throughput vs bare `tokenizers` encode_batch on the same text.

Run: .venv/bin/python bench/data_tokenize.py
Text: the shared prose + math + the Python stdlib's *.py files, cut into ~3000-character documents. Tokenizer: a
byte-level BPE (vocab 8192) trained by marin on a sample. 'bare' = `Tokenizer.encode_batch(texts)` in batches of
512 (no ids extracted, nothing written); 'shard writer' = the whole tokenize step (read Parquet, encode, build
Arrow, hash, write shards + manifest), workers=1. Both use the tokenizers Rust thread pool."""

import glob, os, sysconfig, tempfile, time
from marin.core.settings import shared_data_dir
from marin.data.sources import split_paragraphs, write_documents
from marin.data.tokenizers import train_bpe
from marin.data.shards import TokenizeConfig, tokenize_documents

d = shared_data_dir()
files = (
    sorted(glob.glob(str(d / "text" / "*.txt")))
    + sorted(glob.glob(str(d / "math" / "*.tex")))
    + sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/*.py"))
)
texts = [p for f in files for p in split_paragraphs(open(f, errors="replace").read(), 3000)]
mb = sum(len(t.encode()) for t in texts) / 1e6
tmp = tempfile.mkdtemp()
tok = train_bpe(texts[::10], 8192)
tok.save(tmp + "/tok")
write_documents([{"id": str(i), "text": t, "source": "b", "meta": {}} for i, t in enumerate(texts)], tmp + "/docs")


def bare():
    n = 0
    for i in range(0, len(texts), 512):
        for e in tok.tok.encode_batch(texts[i : i + 512]):
            n += len(e.ids)
    return n


def bare_no_ids():
    for i in range(0, len(texts), 512):
        tok.tok.encode_batch(texts[i : i + 512])


k = 0


def writer():
    global k
    k += 1
    return tokenize_documents(
        TokenizeConfig(tmp + "/docs", tmp + "/tok", docs_per_shard=1024, workers=1), f"{tmp}/out{k}"
    )["data/tokens"]


bare()
fns = [
    ("bare encode_batch (no ids read)", bare_no_ids),
    ("bare encode_batch + .ids", bare),
    ("marin shard writer (whole step)", writer),
]
best = {n: float("inf") for n, _ in fns}
for _ in range(4):  # interleaved, so load from other processes on a shared machine hits every path alike
    for name, fn in fns:
        t = time.perf_counter()
        fn()
        best[name] = min(best[name], time.perf_counter() - t)
rows = list(best.items())
ntok = bare()
print(f"{len(texts):,} documents, {mb:.1f} MB, {ntok:,} tokens; best of 4 interleaved runs; {os.cpu_count()} CPUs\n")
print("| path | seconds | MB/s | tokens/s | vs bare |")
print("|---|---|---|---|---|")
for name, s in rows:
    print(f"| {name} | {s:.2f} | {mb / s:.2f} | {ntok / s:,.0f} | {rows[0][1] / s:.2f} |")
