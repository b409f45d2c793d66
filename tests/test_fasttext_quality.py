"""fastText quality classifiers end to end: a tiny model trained DCLM-style by its executor step on the lab's shared
data, the quality stage with it (a threshold in-process, the top fraction in 2 worker processes), and the same model by `file://` and
`http://` URL from a real HTTP server on 127.0.0.1 (downloaded once, into the cache, atomically)."""

import functools
import http.server
import threading
import numpy as np
import pytest
from marin.core.config import ConfigError
from marin.core.executor import Executor
from marin.data.fasttext import FastTextTrainConfig, lab_quality_texts, train_fasttext_step
from marin.data.filters import QualityConfig, quality_filter, quality_step
from marin.data.sources import read_attributes, read_documents, write_documents

TINY = {"dim": 16, "bucket": 1 << 14, "epoch": 20, "lr": 0.2}  # a 1.4 MB model in about a second


def _docs(prefix, texts):
    return [{"id": f"{prefix}{i}", "text": t, "source": prefix, "meta": {}} for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    "The lab's DCLM-style data as document sets, a model trained on them by its step, and the held-out mix."
    tmp = tmp_path_factory.mktemp("fasttext")
    lab = lab_quality_texts()
    pos = [lab["train_positive"][i] for i in np.random.default_rng(0).permutation(len(lab["train_positive"]))[:600]]
    write_documents(_docs("p", pos), str(tmp / "pos"))  # prose and LaTeX, like the test mix
    write_documents(_docs("n", lab["train_negative"]), str(tmp / "neg"))
    mix = _docs("p", lab["test_positive"]) + _docs("n", lab["test_negative"])
    write_documents(
        [mix[i] for i in np.random.default_rng(0).permutation(len(mix))], str(tmp / "mix"), docs_per_file=60
    )
    ex = Executor(str(tmp / "store"), verbose=False)
    train = train_fasttext_step(FastTextTrainConfig((str(tmp / "pos"),), (str(tmp / "neg"),), **TINY))
    q = quality_step(
        QualityConfig(str(tmp / "mix"), rules=None, classifier="fasttext", model=train, min_score=0.5, workers=1),
        "quality/fasttext",
    )
    out = ex.run([q])
    return {"tmp": tmp, "model": out[train] + "/model.bin", "threshold": out[q], "n": len(mix)}


def _attrs(path):
    return read_attributes(str(path)).to_pandas()


def test_step_trains_and_threshold_filters(trained):
    a = _attrs(trained["threshold"])
    assert len(a) == trained["n"] and a.score.between(0, 1).all()
    pos = a.id.str.startswith("p")
    recall, precision = a.kept[pos].mean(), pos[a.kept].mean()
    assert recall > 0.9 and precision > 0.8, (recall, precision)
    assert (a.reason[~a.kept] == "classifier-score").all() and (a.kept == (a.score >= 0.5)).all()
    assert [d["id"] for d in read_documents(trained["threshold"])] == a.id[a.kept].tolist()


def test_top_fraction_in_worker_processes(trained):
    "Two worker processes load the model by path themselves and keep exactly the best 30% by (-score, position)."
    tmp = trained["tmp"]
    cfg = QualityConfig(
        str(tmp / "mix"), rules=None, classifier="fasttext", model=trained["model"], keep_top_fraction=0.3, workers=2
    )
    m = quality_filter(cfg, str(tmp / "top"))
    a, ref = _attrs(tmp / "top"), _attrs(trained["threshold"])  # the threshold run scored the same documents in-process
    k = int(np.ceil(0.3 * trained["n"]))
    best = sorted(range(len(ref)), key=lambda i: (-ref.score[i], i))[:k]
    assert m["data/documents"] == k and np.array_equal(a.score, ref.score) and a.id.equals(ref.id)
    assert sorted(np.nonzero(a.kept.to_numpy())[0].tolist()) == sorted(best)
    assert (a.reason[~a.kept] == "classifier-top-fraction").all() and a.id[a.kept].str.startswith("p").mean() > 0.95
    assert [d["id"] for d in read_documents(str(tmp / "top"))] == a.id[a.kept].tolist()


def test_model_by_url_downloaded_once(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_FASTTEXT_CACHE", str(tmp_path / "cache"))
    served, gets = tmp_path / "served", []
    served.mkdir()
    (served / "quality.bin").write_bytes(open(trained["model"], "rb").read())

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            gets.append((self.command, self.path))

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/quality.bin"
        want = _attrs(trained["threshold"])
        base = QualityConfig(
            str(trained["tmp"] / "mix"), rules=None, classifier="fasttext", model=url, min_score=0.5, workers=1
        )
        for i, model in enumerate([url, url, "file://" + str(served / "quality.bin")]):
            quality_filter(base.replace(model=model), str(tmp_path / f"q{i}"))
            assert _attrs(tmp_path / f"q{i}").equals(want), model
        assert [g for g in gets if g[0] == "GET"] == [("GET", "/quality.bin")]  # one download for both runs
        assert [p.name for p in (tmp_path / "cache").iterdir()] == [
            p.name for p in (tmp_path / "cache").glob("*-quality.bin")
        ]
        with pytest.raises(ConfigError, match=r"^model: .*/missing\.bin does not exist"):
            quality_filter(base.replace(model=url.replace("quality", "missing")), str(tmp_path / "bad"))
    finally:
        srv.shutdown()
    with pytest.raises(ConfigError, match=r"^label: '__label__good' is not a label .*__label__hq"):
        quality_filter(base.replace(model=trained["model"], label="__label__good"), str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()  # refused before any work
