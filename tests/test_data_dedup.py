"Near-duplicates planted in real prose are found (recall >= 0.95) and distinct documents are not merged (precision >= 0.95)."

import random, sys, pathlib
import pytest
import numpy as np, pyarrow.parquet as pq
from marin.core.executor import Executor
from marin.core.settings import shared_data_dir
from marin.core import storage
from marin.data import dedup
from marin.data.dedup import near_duplicate_clusters, clusters_from_pairs, DedupConfig, dedup_step, dedup_in_memory
from marin.data.dedup import dedup_documents
from marin.data.sources import split_paragraphs, write_documents, read_documents, read_attributes
from marin.data.filters import QualityConfig, quality_step, ClassifierTrainConfig, train_classifier_step


def _corpus(n_base=600, seed=0):
    paras = []
    for f in sorted((shared_data_dir() / "text").glob("*.txt")):
        paras += [p for p in split_paragraphs(f.read_text(), 1500) if len(p) > 400]
    rnd = random.Random(seed)
    base = paras[:n_base]

    def mutate(s, k):
        s = s.split(" ")
        for _ in range(k):  # word-level edits: replace, delete or insert a word
            i = rnd.randrange(len(s))
            op = rnd.random()
            if op < 0.4:
                s[i] = rnd.choice(["the", "a", "quite", "very", "indeed"])
            elif op < 0.7:
                del s[i]
            else:
                s.insert(i, rnd.choice(["so", "then", "perhaps"]))
        return " ".join(s)

    planted = [(i, mutate(base[i], rnd.randint(1, 6))) for i in range(0, n_base, 3)]
    return base + [t for _, t in planted], planted, n_base


def test_planted_recall_and_precision():
    texts, planted, n = _corpus()
    lab = near_duplicate_clusters(texts, num_perm=128, bands=16, shingle=5, threshold=0.5)
    truth = {n + k: i for k, (i, _) in enumerate(planted)}
    found = sum(lab[j] == lab[i] for j, i in truth.items())
    assert found / len(truth) >= 0.95, found / len(truth)
    # precision over predicted duplicate pairs (each doc with its cluster representative)
    pred = [(int(lab[j]), j) for j in range(len(texts)) if lab[j] != j]
    true_pairs = {(min(i, j), max(i, j)) for j, i in truth.items()}
    correct = sum((min(a, b), max(a, b)) in true_pairs for a, b in pred)
    assert correct / max(len(pred), 1) >= 0.95, (correct, len(pred))


def test_same_clusters_as_datasketch():
    from datasketch import MinHash, MinHashLSH

    texts, planted, n = _corpus(150)
    ours = near_duplicate_clusters(texts, num_perm=128, bands=16, shingle=5, threshold=0.0)
    lsh = MinHashLSH(num_perm=128, params=(16, 8))
    mhs = []
    for i, t in enumerate(texts):
        b = t.encode()
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([b[j : j + 5] for j in range(len(b) - 4)])
        lsh.insert(i, m)
        mhs.append(m)
    pairs = np.array([(i, j) for i, m in enumerate(mhs) for j in lsh.query(m) if j > i], dtype=np.int64).reshape(-1, 2)
    theirs = clusters_from_pairs(len(texts), pairs)
    part = lambda lab: {tuple(np.nonzero(lab == c)[0]) for c in np.unique(lab)}
    assert part(ours) == part(theirs)


def test_dedup_then_quality_steps(tmp_path):
    texts, planted, n = _corpus(90)
    junk = ["Home | About | Login | Share | Menu " * 20, "click here click here " * 30]
    docs = [{"id": f"d{i}", "text": t, "source": "prose", "meta": {}} for i, t in enumerate(texts + [texts[0]] + junk)]
    write_documents(docs, str(tmp_path / "docs"))
    neg = [
        {
            "id": f"n{i}",
            "text": " ".join(
                random.Random(i).choices(["Home", "Login", "Share", "Menu", "Cookies", "Subscribe", "Privacy"], k=80)
            ),
            "source": "nav",
            "meta": {},
        }
        for i in range(40)
    ]
    write_documents(neg, str(tmp_path / "neg"))
    ex = Executor(str(tmp_path / "store"), verbose=False)
    dd = dedup_step(DedupConfig(str(tmp_path / "docs")), "dedup/prose")
    clf = train_classifier_step(ClassifierTrainConfig((dd,), (str(tmp_path / "neg"),)))
    q = quality_step(QualityConfig(dd, classifier=clf, min_score=0.5), "quality/prose")
    r = ex.run([q])
    a = read_attributes(r[dd]).to_pandas()
    assert (a.reason == "exact-duplicate").sum() == 1 and a.reason.isin(
        ["near-duplicate", "all-paragraphs-duplicate"]
    ).sum() >= 0.9 * len(planted)
    qa = read_attributes(r[q]).to_pandas()  # one attributes-N.parquet per shard
    assert set(qa[~qa.kept].reason) <= {
        "few-stop-words",
        "too-few-words",
        "duplicate-lines",
        "repeated-2gram",
        "classifier-score",
        "mean-word-length",
        "non-alpha-words",
    }
    assert not qa.set_index("id").loc[["d%d" % (len(texts) + 1), "d%d" % (len(texts) + 2)]].kept.any()  # junk dropped
    kept = list(read_documents(r[q]))
    assert len(kept) >= 0.8 * n
    rec = ex.ledger.sql("select step, metrics from runs where status='SUCCESS'")
    assert set(rec.step) == {"dedup/prose", "quality/classifier", "quality/prose"}


def _shared_docs():
    "The planted corpus plus exact copies, repeated boilerplate and empty text, shuffled so duplicates cross shards."
    texts, planted, n = _corpus(300)
    para = "A boilerplate paragraph long enough to count, repeated across many documents of the corpus, " * 2
    texts = texts + [texts[3].upper(), texts[8], texts[10] + "\n\n" + para, para + "\n\n" + texts[12][:200], para, "  "]
    random.Random(3).shuffle(texts)
    return [{"id": f"d{i}", "text": t, "source": "prose", "meta": {"i": i}} for i, t in enumerate(texts)]


def test_sharded_same_as_in_memory_for_1_2_4_workers(tmp_path, monkeypatch):
    docs = _shared_docs()
    write_documents(docs, str(tmp_path / "in"), docs_per_file=45)
    cfg = DedupConfig(str(tmp_path / "in"))
    kept, attrs, removed = dedup_in_memory(cfg, [dict(d) for d in docs])
    assert attrs["reason"].count("near-duplicate") > 90 and attrs["reason"].count("exact-duplicate") == 2 and removed
    hashes = set()
    monkeypatch.setattr(dedup, "REDUCE_HERE_ROWS", 0)  # the reduces too on the pool, however few their rows
    for w in (1, 2, 4):
        out = str(tmp_path / f"out{w}")
        m = dedup_documents(DedupConfig(str(tmp_path / "in"), workers=w), out)
        assert read_attributes(out).to_pydict() == attrs, w
        assert list(read_documents(out)) == kept and m["data/paragraphs_removed"] == removed, w
        hashes.add(storage.manifest_hash(storage.tree_manifest(out)))
    assert len(hashes) == 1  # identical output bytes whatever the worker count
