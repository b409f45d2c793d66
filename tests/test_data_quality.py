"The quality filter's top-fraction cut over shards: byte-identical outputs for 1 and 2 workers (tests/test_data_scale: 4 and Ray), and a rerun after a lost shard redoes only it."

import pathlib
import numpy as np
import pytest
from marin.core.settings import shared_data_dir
from marin.data.filters import QualityClassifier, QualityConfig, quality_filter
from marin.data.sources import read_attributes, split_paragraphs, write_documents


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quality")
    texts = split_paragraphs((shared_data_dir() / "text" / "little_women.txt").read_text(), 1500)[:400]
    rng = np.random.default_rng(0)
    nav = [" ".join(rng.choice(["Home", "the", "and", "Login", "with", "Menu", "Privacy"], 80)) for _ in range(80)]
    docs = [{"id": f"d{i}", "text": t, "source": "s", "meta": {}} for i, t in enumerate(texts + nav)]
    write_documents([docs[i] for i in rng.permutation(len(docs))], str(tmp / "docs"), docs_per_file=70)
    QualityClassifier.fit(texts[:100], nav[:40]).save(str(tmp / "clf"))
    return tmp


def _files(out: pathlib.Path) -> dict:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".tasks" not in p.parts
    }


def test_top_fraction_same_bytes_for_any_worker_count(corpus):
    cfg = lambda w: QualityConfig(
        str(corpus / "docs"), classifier=str(corpus / "clf"), min_score=0.2, keep_top_fraction=0.5, workers=w
    )
    outs = {w: corpus / f"out{w}" for w in (1, 2)}
    metrics = {w: quality_filter(cfg(w), str(o)) for w, o in outs.items()}
    assert metrics[1] == metrics[2] and metrics[1]["data/dropped/classifier-top-fraction"] > 0
    assert _files(outs[1]) == _files(outs[2]) and len(_files(outs[1])) == 2 * 7 + 1 + 2 * 7 + 1
    a = read_attributes(str(outs[1]))
    assert a.num_rows == 480 and sum(a["kept"].to_pylist()) == -(
        -sum(r in ("", "classifier-top-fraction") for r in a["reason"].to_pylist()) // 2
    )
    # a shard whose output and done marker were lost (a crash) is redone alone, to the same bytes
    (outs[2] / "documents-00003.parquet").unlink()
    (outs[2] / ".tasks" / "quality" / "00003.json").unlink()
    before = {p: p.stat().st_mtime_ns for p in outs[2].glob("documents-*.parquet")}
    assert quality_filter(cfg(1), str(outs[2])) == metrics[1]
    assert {p: p.stat().st_mtime_ns for p in before} == before and _files(outs[2]) == _files(outs[1])
