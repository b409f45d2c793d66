"""Dedup at scale (#21): peak memory, planted-duplicate recall/precision and speed of the sharded dedup step, and
datatrove's MinHash pipeline on the same corpus.

Run: TQDM_DISABLE=1 nice -n 5 .venv/bin/python bench/dedup_scale.py --sizes 0.5 1.0 --workers 2 --datatrove-mb 0
     TQDM_DISABLE=1 nice -n 5 .venv/bin/python bench/dedup_scale.py --sizes --workers 2 --datatrove-mb 100

The corpus is synthetic, made from the shared text (`shared/data/text`): each original document is 5 paragraphs of
8 sentences drawn at random from the books' ~23,000 sentences, so originals share sentences only by chance. After an
original, with probability 0.08 a near-duplicate of an earlier original (one of the last 5,000, so copies cross
shards) follows, with 1-6 word edits (replace, delete, insert), and with probability 0.02 an exact copy (upper-cased:
the same normalised text). Documents are generated and written shard by shard (`write_documents` over a generator),
never held at once; the ground truth (copy -> original id) is kept as two integer lists.

Peak memory: the dedup step runs in a subprocess; psutil polls the resident memory of it and its pool workers every
0.1 s (the sum over the process tree), and `os.wait4`'s `ru_maxrss` (the child's own and its waited-for workers') gives the largest single process.
Recall: planted copies dropped as exact- or near-duplicate with the cluster of their original. Precision: documents
dropped as exact- or near-duplicate that are planted copies of that cluster.
"""

import argparse, json, os, random, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from marin.core.settings import shared_data_dir  # noqa: E402

try:  # datatrove is in the compare group; its English word tokenizer needs spaCy, which the lab does not install
    from datatrove.utils.word_tokenizers import WordTokenizer

    class WhitespaceTokenizer(WordTokenizer):
        "Words split on whitespace (datatrove has already lower-cased the text and removed punctuation)."

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
except ImportError:
    WhitespaceTokenizer = None


def sentence_pool() -> list[str]:
    text = " ".join(f.read_text() for f in sorted((shared_data_dir() / "text").glob("*.txt")))
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if 20 <= len(s) <= 400]


def _edit(text: str, rnd: random.Random) -> str:
    w = text.split(" ")
    for _ in range(rnd.randint(1, 6)):
        i, op = rnd.randrange(len(w)), rnd.random()
        if op < 0.4:
            w[i] = rnd.choice(["the", "a", "quite", "very", "indeed"])
        elif op < 0.7:
            del w[i]
        else:
            w.insert(i, rnd.choice(["so", "then", "perhaps"]))
    return " ".join(w)


def generate(out: str, target_bytes: float, *, docs_per_shard: int = 5000, seed: int = 0) -> dict:
    "Write the planted corpus as a document set under `out`; the truth {copy index: original index} and counts."
    from marin.data.sources import write_documents

    sents, rnd = sentence_pool(), random.Random(seed)
    copies, originals = [], []  # planted copy index, its original's index
    recent: list[tuple[int, str]] = []

    def docs():
        n, nbytes = 0, 0
        while nbytes < target_bytes:
            text = "\n\n".join(" ".join(rnd.choices(sents, k=8)) for _ in range(5))
            recent.append((n, text))
            if len(recent) > 5000:
                recent.pop(rnd.randrange(len(recent)))
            out_docs = [(n, text)]
            u = rnd.random()
            if u < 0.10 and n > 0:
                j, orig = recent[rnd.randrange(len(recent))]
                copies.append(n + 1)
                originals.append(j)
                out_docs.append((n + 1, orig.upper() if u < 0.02 else _edit(orig, rnd)))
            for k, t in out_docs:
                nbytes += len(t)
                yield {"id": f"doc{k:09d}", "text": t, "source": "synthetic", "meta": {}}
            n += len(out_docs)

    s = write_documents(docs(), out, docs_per_file=docs_per_shard)
    return {
        "copies": copies,
        "originals": originals,
        "documents": s["documents"],
        "bytes": s["bytes"],
        "files": s["files"],
    }


def _stage_main(src: str, out: str, workers: int, fuzzy_only: bool) -> None:
    "The dedup step alone (run in a subprocess): prints its metrics and wall time as JSON."
    from marin.data.dedup import DedupConfig, dedup_documents

    kw = dict(paragraphs=False) if fuzzy_only else {}  # the datatrove match: no paragraph level
    t = time.perf_counter()
    m = dedup_documents(DedupConfig(src, workers=workers, **kw), out)
    print(json.dumps({"seconds": time.perf_counter() - t, **m}))


def run_stage(src: str, out: str, workers: int, fuzzy_only: bool = False) -> dict:
    "Run the step in a subprocess, polling the summed RSS of its process tree."
    import psutil

    cmd = [sys.executable, __file__, "--stage", src, out, str(workers), str(int(fuzzy_only))]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    proc, peak = psutil.Process(p.pid), 0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)  # this child's usage, its pool workers included
        if pid:
            break
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(q.memory_info().rss for q in tree if q.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    stdout, code = p.stdout.read(), os.waitstatus_to_exitcode(status)
    p.returncode = code
    if code:
        raise RuntimeError(f"dedup stage failed ({code}): {stdout[-2000:]}")
    r = json.loads(stdout.strip().splitlines()[-1])
    return {**r, "peak_rss_tree": peak, "maxrss_one_process": usage.ru_maxrss * 1024}


def score(out: str, truth: dict) -> tuple[float, float]:
    from marin.data.sources import read_attributes

    a = read_attributes(out, ["id", "reason", "cluster"]).to_pydict()
    want = {f"doc{c:09d}": f"doc{o:09d}" for c, o in zip(truth["copies"], truth["originals"])}
    # a copy of a copy's original: its cluster is the original's cluster, which is the original itself (first)
    dropped = {
        i: c for i, r, c in zip(a["id"], a["reason"], a["cluster"]) if r in ("exact-duplicate", "near-duplicate")
    }
    hit = sum(dropped.get(i) == o for i, o in want.items())
    correct = sum(want.get(i) == c for i, c in dropped.items())
    return hit / max(len(want), 1), correct / max(len(dropped), 1)


def datatrove_removed(src: str, work: str, n_files: int, workers: int, shingle: int, bands: int, rows: int) -> set[str]:
    "datatrove's four MinHash stages with its local executor; the ids of the documents its filter removes."
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.hashing import HashConfig

    cfg = MinhashConfig(
        n_grams=shingle, num_buckets=bands, hashes_per_bucket=rows, hash_config=HashConfig(precision=32, hash_fc="sha1")
    )
    read = lambda: ParquetReader(src, glob_pattern="documents-*.parquet", text_key="text", id_key="id")
    w = f"{work}/dt"
    stages = [
        ([read(), MinhashDedupSignature(f"{w}/sigs", config=cfg, language=WhitespaceTokenizer("en"))], n_files),
        ([MinhashDedupBuckets(f"{w}/sigs", f"{w}/buckets", config=cfg)], bands),
        ([MinhashDedupCluster(f"{w}/buckets", f"{w}/remove", config=cfg)], 1),
        ([read(), MinhashDedupFilter(f"{w}/remove", exclusion_writer=ParquetWriter(f"{w}/removed"))], n_files),
    ]
    for i, (pipe, tasks) in enumerate(stages):
        LocalPipelineExecutor(pipe, tasks=tasks, workers=min(workers, tasks), logging_dir=f"{w}/logs{i}").run()
    import pyarrow.parquet as pq

    return {
        i
        for f in Path(f"{w}/removed").glob("*.parquet")
        for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()
    }


def compare_datatrove(mb: float, workers: int, tmp: str) -> None:
    from marin.data.sources import read_attributes

    src = f"{tmp}/dt-corpus"
    truth = generate(src, mb * 1e6, docs_per_shard=2000, seed=1)
    n, planted = truth["documents"], len(truth["copies"])
    print(
        f"\n### datatrove: {n:,} documents, {truth['bytes'] / 1e6:.0f} MB, {planted:,} planted copies, {workers} workers\n"
    )
    print(f"load average before: {os.getloadavg()}")
    ours = run_stage(src, f"{tmp}/dt-ours", workers, fuzzy_only=True)
    load_ours = os.getloadavg()
    t = time.perf_counter()
    theirs = datatrove_removed(src, tmp, truth["files"], workers, shingle=5, bands=16, rows=8)
    t_dt = time.perf_counter() - t
    load_dt = os.getloadavg()
    a = read_attributes(f"{tmp}/dt-ours", ["id", "kept"]).to_pydict()
    ours_removed = {i for i, k in zip(a["id"], a["kept"]) if not k}
    want = {f"doc{c:09d}" for c in truth["copies"]}
    print(
        "| pipeline | seconds | documents/s | removed | planted copies removed | other documents removed | load after |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, sec, rem, load in (
        ("marin dedup (exact + MinHash, byte 5-grams)", ours["seconds"], ours_removed, load_ours),
        ("datatrove MinHash (word 5-grams)", t_dt, theirs, load_dt),
    ):
        print(
            f"| {name} | {sec:.1f} | {n / sec:,.0f} | {len(rem):,} | {len(rem & want):,} / {planted:,}"
            f" | {len(rem - want):,} | {load[0]:.2f} |"
        )
    print(f"\nours / datatrove documents/s: {t_dt / ours['seconds']:.2f}x")
    print(
        f"same documents removed: {ours_removed == theirs} (only ours: {len(ours_removed - theirs)}, only datatrove:"
        f" {len(theirs - ours_removed)})"
    )
    for i in sorted(ours_removed ^ theirs)[:5]:
        print("  differs:", i, "planted" if i in want else "not planted", "ours" if i in ours_removed else "datatrove")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--stage":
        _stage_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), bool(int(sys.argv[5])))
        sys.exit(0)
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=float, nargs="*", default=[0.5, 4.0], help="corpus sizes in GB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--datatrove-mb", type=float, default=60, help="0 skips the datatrove comparison")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: a new temporary one, removed after)")
    a = ap.parse_args()
    tmp = a.tmp or tempfile.mkdtemp(prefix="dedup-scale-")
    try:
        if a.sizes:
            print(
                "| corpus | documents | shards | planted copies | generate s | dedup s | documents/s | MB/s"
                " | peak RSS (tree) | largest process | recall | precision | load |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for gb in a.sizes:
            t = time.perf_counter()
            truth = generate(f"{tmp}/c{gb}", gb * 1e9)
            t_gen = time.perf_counter() - t
            r = run_stage(f"{tmp}/c{gb}", f"{tmp}/o{gb}", a.workers)
            rec, prec = score(f"{tmp}/o{gb}", truth)
            print(
                f"| {truth['bytes'] / 1e9:.2f} GB | {truth['documents']:,} | {truth['files']} | {len(truth['copies']):,}"
                f" | {t_gen:.0f} | {r['seconds']:.0f} | {truth['documents'] / r['seconds']:,.0f}"
                f" | {truth['bytes'] / 1e6 / r['seconds']:.1f} | {r['peak_rss_tree'] / 2**20:,.0f} MiB"
                f" | {r['maxrss_one_process'] / 2**20:,.0f} MiB | {rec:.4f} | {prec:.4f} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )
            shutil.rmtree(f"{tmp}/c{gb}", ignore_errors=True)
            shutil.rmtree(f"{tmp}/o{gb}", ignore_errors=True)
        if a.datatrove_mb:
            compare_datatrove(a.datatrove_mb, a.workers, tmp)
    finally:
        if not a.tmp:
            shutil.rmtree(tmp, ignore_errors=True)
