"""The two quality classifiers side by side, DCLM-style, on the lab's shared data: fastText (`marin.data.fasttext`)
and the hashed n-gram logistic regression (`marin.data.filters.QualityClassifier`). Both are trained on the same
documents (shared prose + LaTeX against the web pages' whole text, classes balanced) and scored on the same documents:
precision / recall of the high-quality class at score 0.5 on the training documents (held-in) and on held-out ones
(the last 10 web pages and as many unseen prose/LaTeX pieces), ROC AUC (what a top-fraction cut depends on), and
documents/s per core. One process pinned to one core, one BLAS thread, fastText with one thread; speeds are documents
per CPU-second of this process (fastText's training: of its child process), so other load on the machine inflates
the wall clock but not these.

Run: .venv/bin/python bench/quality_classifiers.py"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

import platform, resource, sys, tempfile, time
import numpy as np
from marin.data.fasttext import FastTextScorer, FastTextTrainConfig, fit_fasttext, lab_quality_texts, save_fasttext
from marin.data.filters import QualityClassifier

BATCH = 2048  # the quality stage's batch


def cpu(children: bool = False) -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scores(clf, texts: list[str]) -> np.ndarray:
    return np.concatenate([clf.score(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)])


def pr(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    tp, fp = int((pos >= 0.5).sum()), int((neg >= 0.5).sum())
    return tp / max(tp + fp, 1), tp / len(pos)


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    "P(a random positive scores above a random negative), ties half."
    return float(((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()))


lab = lab_quality_texts()
neg = lab["train_negative"]
rng = np.random.default_rng(0)
pos = [lab["train_positive"][i] for i in sorted(rng.permutation(len(lab["train_positive"]))[: len(neg)])]
every = pos + neg + lab["test_positive"] + lab["test_negative"]
reps = max(1, 20_000 // len(every))  # score about 20k documents for the speed
mb = sum(len(t.encode()) for t in every) / 1e6
print(
    f"train: {len(pos)} high-quality + {len(neg)} web; held-out: {len(lab['test_positive'])} + "
    f"{len(lab['test_negative'])}; speed over {reps} x {len(every)} documents ({mb:.2f} MB each time)"
)
print(
    f"machine: {platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}"
)

fits = {
    "hashed LR (2^18 uni+bigrams, L-BFGS)": lambda: QualityClassifier.fit(pos, neg),
    "fastText defaults (dim 32, bigrams, epoch 5, lr 0.1, 2^18 buckets)": lambda: FastTextScorer(
        fit_fasttext(pos, neg, FastTextTrainConfig(("-",), ("-",)))
    ),
    "fastText (dim 32, bigrams, epoch 25, lr 0.2, 2^18 buckets)": lambda: FastTextScorer(
        fit_fasttext(pos, neg, FastTextTrainConfig(("-",), ("-",), epoch=25, lr=0.2))
    ),
}
rows = []
for name, fit in fits.items():
    c0, k0 = cpu(), cpu(children=True)
    clf = fit()
    train_s = (cpu() - c0) + (cpu(children=True) - k0)
    with tempfile.TemporaryDirectory() as d:
        if isinstance(clf, FastTextScorer):
            save_fasttext(clf.model, d + "/model.bin")
            size = os.path.getsize(d + "/model.bin")
        else:
            clf.save(d)
            size = os.path.getsize(d + "/classifier.npz")
    p_in, r_in = pr(scores(clf, pos), scores(clf, neg))
    tp, tn = scores(clf, lab["test_positive"]), scores(clf, lab["test_negative"])
    p_out, r_out = pr(tp, tn)
    scores(clf, every[:BATCH])  # warm
    c0, t0 = cpu(), time.perf_counter()
    for _ in range(reps):
        scores(clf, every)
    dt, wall = cpu() - c0, time.perf_counter() - t0
    rows.append(
        (name, p_in, r_in, p_out, r_out, auc(tp, tn), reps * len(every) / dt, reps * mb / dt, train_s, size / 1e6)
    )
    print(f"  {name}: done (scoring wall {wall:.1f} s for {dt:.1f} CPU s)", file=sys.stderr)

print()
print(
    "| classifier | held-in P / R | held-out P / R | held-out ROC AUC | docs/s per core | MB/s per core "
    "| train CPU s | model MB |"
)
print("|---|---|---|---|---|---|---|---|")
for name, p_in, r_in, p_out, r_out, a, dps, mbps, ts, size in rows:
    print(
        f"| {name} | {p_in:.3f} / {r_in:.3f} | {p_out:.3f} / {r_out:.3f} | {a:.3f} | {dps:,.0f} | {mbps:.2f} | "
        f"{ts:.1f} | {size:.1f} |"
    )
