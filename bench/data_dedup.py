"""MinHash-LSH near-duplicate detection: marin.data.dedup (vectorised numpy) vs datasketch, same parameters, same planted corpus.

Run: .venv/bin/python bench/data_dedup.py [--docs 2000]
Both use byte 5-gram shingles, 128 permutations, 16 bands x 8 rows, no candidate verification; clusters are the
connected components of the candidate pairs. Prints a Markdown table."""

import argparse, random, time
import numpy as np
from datasketch import MinHash, MinHashLSH
from marin.core.settings import shared_data_dir
from marin.data.dedup import near_duplicate_clusters, clusters_from_pairs
from marin.data.sources import split_paragraphs


def planted_corpus(n_base: int, dup_every: int = 4, edits: int = 10, seed: int = 0):
    d = shared_data_dir() / "text"
    paras = []
    for f in sorted(d.glob("*.txt")):
        paras += [p for p in split_paragraphs(f.read_text(), 1500) if len(p) > 400]
    base = paras[:n_base]
    rnd = random.Random(seed)

    def mutate(s):
        s = list(s)
        for _ in range(edits):
            s[rnd.randrange(len(s))] = rnd.choice("abcdefghij ")
        return "".join(s)

    planted = [(i, mutate(base[i])) for i in range(0, len(base), dup_every)]
    return base + [t for _, t in planted], planted, len(base)


def datasketch_clusters(texts, num_perm=128, bands=16, shingle=5):
    lsh = MinHashLSH(num_perm=num_perm, params=(bands, num_perm // bands))
    mhs = []
    for i, t in enumerate(texts):
        b = t.encode("utf-8")
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch([b[j : j + shingle] for j in range(len(b) - shingle + 1)])
        lsh.insert(i, m)
        mhs.append(m)
    pairs = [(i, j) for i, m in enumerate(mhs) for j in lsh.query(m) if j > i]
    return clusters_from_pairs(len(texts), np.array(pairs, dtype=np.int64).reshape(-1, 2))


def score(lab, planted, n_base):
    recall = np.mean([lab[n_base + k] == lab[i] for k, (i, _) in enumerate(planted)])
    false = np.mean([lab[i] != i for i in range(n_base)])  # distinct base docs merged with another base doc
    return recall, 1 - false


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    a = ap.parse_args()
    texts, planted, n_base = planted_corpus(a.docs)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    near_duplicate_clusters(texts[:50])  # warm-up
    t = time.perf_counter()
    ours = near_duplicate_clusters(texts, threshold=0.0)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    theirs = datasketch_clusters(texts)
    t_ds = time.perf_counter() - t
    same = {tuple(sorted(np.nonzero(ours == c)[0])) for c in np.unique(ours)} == {
        tuple(sorted(np.nonzero(theirs == c)[0])) for c in np.unique(theirs)
    }
    r_o, p_o = score(ours, planted, n_base)
    r_d, p_d = score(theirs, planted, n_base)
    print(f"{len(texts)} documents ({mb:.1f} MB), {len(planted)} planted near-duplicates (10 random char edits each)\n")
    print("| implementation | seconds | documents/s | planted recall | distinct kept apart |")
    print("|---|---|---|---|---|")
    print(f"| marin.data.dedup (numpy) | {t_ours:.2f} | {len(texts) / t_ours:,.0f} | {r_o:.3f} | {p_o:.3f} |")
    print(f"| datasketch 2.0 MinHash + MinHashLSH | {t_ds:.2f} | {len(texts) / t_ds:,.0f} | {r_d:.3f} | {p_d:.3f} |")
    print(f"\nspeed-up: {t_ds / t_ours:.1f}x; identical clusters: {same}")
