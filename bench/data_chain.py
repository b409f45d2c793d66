"""Throughput of the whole data chain (issue #21): import → decontaminate → quality → dedup → tokenize, documents/s
per stage and end to end, with 1 and 2 local workers and on a local Ray cluster (one node, 2 CPUs), side by side in
one run, on one corpus; and whether the outputs are byte-identical across the three (the executor's output hashes).

The corpus: JSONL files of paragraph documents from the shared novels, cycled with a varying prefix so that the
documents differ, with exact copies and one-word edits planted across files (the dedup stage has work to do).

    .venv/bin/python bench/data_chain.py [--docs 40000] [--files 32] [--shard-docs 2000] [--no-ray]

Each configuration runs in a fresh store; the time per stage is the ledger's `duration_s` of its step (documents in
from the step's `data/documents_in` metric). The load average is printed with the table."""

import argparse, json, os, random, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("MARIN_TRACKER", "disabled")
from marin.core.executor import executor_main, read_status
from marin.core.ledger import Ledger
from marin.core.settings import shared_data_dir

STAGES = ("documents/novels", "decontam/novels", "quality/novels", "dedup/novels", "tokens/novels")


def write_corpus(root: Path, docs: int, files: int, seed: int = 0) -> Path:
    paras = [
        " ".join(p.split())
        for f in ("pride_and_prejudice.txt", "little_women.txt", "tinyshakespeare.txt")
        for p in (shared_data_dir() / "text" / f).read_text().split("\n\n")
        if len(p) > 300
    ]
    rng, src = random.Random(seed), root / "corpus"
    src.mkdir(parents=True)
    per = docs // files
    for i in range(files):
        with open(src / f"part-{i:03d}.jsonl", "w") as f:
            for j in range(per):
                k = i * per + j
                text = f"Document {k}. " + paras[k % len(paras)]
                if j % 10 == 3:
                    text = f"Document {rng.randrange(k + 1)}. " + paras[rng.randrange(len(paras))]
                elif j % 10 == 7:
                    w = text.split()
                    w[len(w) // 2] = "changed"
                    text = " ".join(w)
                f.write(json.dumps({"id": f"{i}-{j}", "text": text}) + "\n")
    return src


def chain(src: Path, shard_docs: int) -> list:
    from marin.data import decontam as dc
    from marin.data.dedup import DedupConfig, dedup_step
    from marin.data.filters import QualityConfig, quality_step
    from marin.data.shards import TokenizeConfig, tokenize_step
    from marin.data.sources import SourceConfig, import_step
    from marin.data.tokenizers import BPETrainConfig, train_bpe_step

    imp = import_step(SourceConfig("novels", (str(src),), format="jsonl", task_bytes=1 << 20, shard_docs=shard_docs))
    index = dc.contamination_index_step(dc.ContaminationIndexConfig((dc.EvalTexts("arc_easy", "arc_easy_test.jsonl"),)))
    dec = dc.decontam_step(dc.DecontamConfig(imp, index), "decontam/novels")
    q = quality_step(QualityConfig(dec), "quality/novels")
    dd = dedup_step(DedupConfig(q), "dedup/novels")
    tok = train_bpe_step(BPETrainConfig(dd, vocab_size=1000, max_documents=2000))
    return [
        imp,
        index,
        dec,
        q,
        dd,
        tok,
        tokenize_step(TokenizeConfig(dd, tok, docs_per_shard=shard_docs // 4), "tokens/novels"),
    ]


def run(src: Path, prefix: Path, shard_docs: int) -> dict:
    steps = chain(src, shard_docs)
    t = time.time()
    r = executor_main(steps, prefix=str(prefix), verbose=False, backend="local")
    wall = time.time() - t
    runs = Ledger(str(prefix / "ledger")).sql(
        "SELECT step, duration_s, coalesce(metrics->>'data/documents_in', metrics->>'data/documents', '0') AS docs_in FROM runs WHERE kind='step' AND status='SUCCESS'"
    )
    per = {row.step: (row.duration_s, int(float(row.docs_in))) for row in runs.itertuples()}
    hashes = {s.name: read_status(r[s])["output_hash"] for s in steps}
    return {"wall": wall, "stages": per, "hashes": hashes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=40_000)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--shard-docs", type=int, default=2000)
    ap.add_argument("--no-ray", action="store_true")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="data-chain-"))
    src = write_corpus(root, a.docs, a.files)
    mb = sum(f.stat().st_size for f in src.glob("*.jsonl")) / 1e6
    print(f"corpus: {a.docs:,} documents, {mb:.1f} MB of JSONL in {a.files} files; load {os.getloadavg()}", flush=True)
    res = {}
    for w in (1, 2):
        os.environ["MARIN_DATA_WORKERS"] = str(w)
        res[f"local, {w} worker{'s' if w > 1 else ''}"] = run(src, root / f"w{w}", a.shard_docs)
        print(f"local {w}: {res[list(res)[-1]]['wall']:.1f} s; load {os.getloadavg()}", flush=True)
    if not a.no_ray:
        from marin.cluster.local import LocalRayCluster, NodeSpec

        os.environ["MARIN_DATA_WORKERS"] = "0"
        with LocalRayCluster(root / "ray", env={"JAX_PLATFORMS": "cpu", "MARIN_TRACKER": "disabled"}) as c:
            c.start([NodeSpec("a", num_cpus=2)])
            c.connect()
            res["Ray, 1 node × 2 CPUs"] = run(src, root / "ray-store", a.shard_docs)
        print(f"ray: {res[list(res)[-1]]['wall']:.1f} s; load {os.getloadavg()}", flush=True)
    base = res["local, 1 worker"]
    print(f"\nload average at the end: {os.getloadavg()}\n")
    print("| stage | " + " | ".join(f"{k}: docs/s" for k in res) + " |")
    print("|---|" + "---|" * len(res))
    for st in STAGES:
        cells = []
        for k, v in res.items():
            d, n = v["stages"].get(st, (0, 0))
            ratio = f" ({base['stages'][st][0] / d:.2f}×)" if k != "local, 1 worker" and d else ""
            cells.append(f"{n / d:,.0f}{ratio}" if d else "-")
        print(f"| {st} | " + " | ".join(cells) + " |")
    print(
        "| whole chain (wall) | "
        + " | ".join(f"{a.docs / v['wall']:,.0f} ({base['wall'] / v['wall']:.2f}×)" for v in res.values())
        + " |"
    )
    same = all(v["hashes"] == base["hashes"] for v in res.values())
    print(f"\noutputs byte-identical across all runs (executor output hashes): {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
