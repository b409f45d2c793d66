"Sources → document sets through the executor; the Hugging Face `datasets` path on a local dataset folder."
import json, os
import pytest
from marin.core.executor import Executor, StepFailed
from marin.data.sources import SourceConfig, import_step, read_documents, iter_documents, document_summary, EmptySourceError


def test_hf_local_dataset_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    d = tmp_path / "my_dataset"; d.mkdir()
    with open(d / "train.jsonl", "w") as f:
        for i in range(5): f.write(json.dumps({"content": f"document number {i}", "n": i}) + "\n")
    docs = list(iter_documents(SourceConfig("hfloc", (str(d),), format="hf", text_field="content")))
    assert [x["text"] for x in docs] == [f"document number {i}" for i in range(5)]
    assert docs[2]["id"] == "hfloc/my_dataset:2" and docs[2]["meta"] == {"n": 2}


def test_import_step_cached_and_versioned(tmp_path):
    src = tmp_path / "corpus"; src.mkdir()
    for i in range(3): (src / f"f{i}.txt").write_text(f"para {i}a\n\npara {i}b\n")
    ex = Executor(str(tmp_path / "store"), verbose=False)
    step = import_step(SourceConfig("prose", (str(src),), split="paragraphs"))
    r = ex.run([step]); out = r[step]
    assert document_summary(out)["documents"] == 6
    assert [d["id"] for d in read_documents(out)][:2] == ["prose/f0.txt:0", "prose/f0.txt:1"]
    assert ex.run([step]).cached == [step.output_name]
    step2 = import_step(SourceConfig("prose", (str(src),), split="file"))
    assert step2.output_name != step.output_name
    assert document_summary(ex.run([step2])[step2])["documents"] == 3
    rec = ex.ledger.sql("select metrics from runs where status='SUCCESS'")
    assert len(rec) == 2


def test_empty_source_fails_with_name(tmp_path):
    src = tmp_path / "empty"; src.mkdir(); (src / "blank.txt").write_text("")
    ex = Executor(str(tmp_path / "store"), verbose=False)
    with pytest.raises(StepFailed):
        ex.run([import_step(SourceConfig("blank", (str(src),)))])
    st = json.load(open(next((tmp_path / "store").glob("documents/blank-*/.executor_status.json"))))
    assert "EmptySourceError" in st["error"] and "'blank'" in st["error"]


def test_missing_path_fails_before_work(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_step(SourceConfig("gone", (str(tmp_path / "missing"),)))
