"Sources → document sets through the executor; the Hugging Face `datasets` path on a local dataset folder."

import json, os
import pytest
from marin.core.executor import Executor, StepFailed
from marin.data.sources import (
    SourceConfig,
    import_step,
    read_documents,
    iter_documents,
    document_summary,
    EmptySourceError,
)


def test_hf_local_dataset_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    d = tmp_path / "my_dataset"
    d.mkdir()
    with open(d / "train.jsonl", "w") as f:
        for i in range(5):
            f.write(json.dumps({"content": f"document number {i}", "n": i}) + "\n")
    docs = list(iter_documents(SourceConfig("hfloc", (str(d),), format="hf", text_field="content")))
    assert [x["text"] for x in docs] == [f"document number {i}" for i in range(5)]
    assert docs[2]["id"] == "hfloc/my_dataset:2" and docs[2]["meta"] == {"n": 2}


def test_import_step_cached_and_versioned(tmp_path):
    src = tmp_path / "corpus"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.txt").write_text(f"para {i}a\n\npara {i}b\n")
    ex = Executor(str(tmp_path / "store"), verbose=False)
    step = import_step(SourceConfig("prose", (str(src),), split="paragraphs"))
    r = ex.run([step])
    out = r[step]
    assert document_summary(out)["documents"] == 6
    assert [d["id"] for d in read_documents(out)][:2] == ["prose/f0.txt:0", "prose/f0.txt:1"]
    assert ex.run([step]).cached == [step.output_name]
    step2 = import_step(SourceConfig("prose", (str(src),), split="file"))
    assert step2.output_name != step.output_name
    assert document_summary(ex.run([step2])[step2])["documents"] == 3
    rec = ex.ledger.sql("select metrics from runs where status='SUCCESS'")
    assert len(rec) == 2


def test_empty_source_fails_with_name(tmp_path):
    src = tmp_path / "empty"
    src.mkdir()
    (src / "blank.txt").write_text("")
    ex = Executor(str(tmp_path / "store"), verbose=False)
    with pytest.raises(StepFailed):
        ex.run([import_step(SourceConfig("blank", (str(src),)))])
    st = json.load(open(next((tmp_path / "store").glob("documents/blank-*/.executor_status.json"))))
    assert "EmptySourceError" in st["error"] and "'blank'" in st["error"]


def test_missing_path_fails_before_work(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_step(SourceConfig("gone", (str(tmp_path / "missing"),)))


def test_html_import_and_extract_step(tmp_path):
    from marin.core.settings import shared_data_dir
    from marin.data.extract import ExtractConfig, extract_step

    pages = shared_data_dir() / "html" / "pages"
    ex = Executor(str(tmp_path / "store"), verbose=False)
    raw = import_step(
        SourceConfig(
            "html", (str(pages / "axios.com.future.html"), str(pages / "blog.gaijinpot.com.chikan.html")), format="html"
        )
    )
    text = extract_step(ExtractConfig(raw), "extract/html")
    r = ex.run([text])
    docs = list(read_documents(r[text]))
    assert len(docs) == 2 and "fear of causing a fuss in public" in " ".join(docs[1]["text"].split())
    assert "Axios newsletters" not in docs[0]["text"] and docs[0]["meta"]["extractor"] == "trafilatura"
    assert document_summary(r[raw])["bytes"] > 5 * document_summary(r[text])["bytes"]


def test_cli_import_tokenize_verify(tmp_path):
    from typer.testing import CliRunner
    from marin.data.cli import app

    (tmp_path / "g.fa").write_text(">a\nACGTACGT\n>b\nGGGCCC\n")
    run = lambda *a: CliRunner().invoke(app, list(a), catch_exceptions=False)
    out = (
        run("import", "genes", str(tmp_path / "g.fa"), "--prefix", str(tmp_path / "s")).output.strip().splitlines()[-1]
    )
    tok = run("tokenize", out, "--tokenizer", "dna", "--prefix", str(tmp_path / "s")).output.strip().splitlines()[-1]
    v = run("verify", tok).output
    assert "ok: 2 documents, 16 tokens" in v
