"""Decontamination as a sharded stage: the same output bytes with 1 and 2 worker processes, and a planted ARC-Easy
question found in whichever shard it lands (the notebook `nbs/13a_decontam` tests the rules in process)."""

import pathlib

from marin.core.settings import shared_data_dir
from marin.data.decontam import (
    ContaminationIndexConfig,
    DecontamConfig,
    EvalTexts,
    build_contamination_index,
    decontaminate_documents,
)
from marin.data.sources import read_attributes, write_documents


def _files(path: pathlib.Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.glob("*")) if f.is_file()}


def test_decontam_same_bytes_for_1_and_2_workers(tmp_path):
    d = shared_data_dir()
    paras = [p for p in (d / "text" / "little_women.txt").read_text().split("\n\n") if len(p) > 100][:800]
    question = "Which piece of safety equipment is used to keep mold spores from entering the respiratory system?"
    docs = [{"id": f"lw{i}", "text": p, "source": "book", "meta": {}} for i, p in enumerate(paras)]
    for i in (5, 420, 799):  # one copy in the first, third and last shard
        docs[i]["text"] += " " + question.upper()
    write_documents(docs, str(tmp_path / "docs"), docs_per_file=200)
    index = str(tmp_path / "index")
    texts = (EvalTexts("arc_easy", "arc_easy_test.jsonl"), EvalTexts("piqa", "piqa_validation.jsonl"))
    build_contamination_index(ContaminationIndexConfig(texts), index)
    out = {}
    for w in (1, 2):
        m = decontaminate_documents(DecontamConfig(str(tmp_path / "docs"), index, workers=w), str(tmp_path / f"w{w}"))
        assert m["data/dropped/contaminated"] == 3 and m["data/decontam/arc_easy"] == 3 and m["data/decontam/piqa"] == 0
        out[w] = _files(tmp_path / f"w{w}")
    assert sorted(out[1]) == sorted(out[2]) and len([f for f in out[1] if f.startswith("documents-")]) == 4
    assert out[1] == out[2], "decontamination output depends on the worker count"
    dropped = [a["id"] for a in read_attributes(str(tmp_path / "w2")).to_pylist() if not a["kept"]]
    assert dropped == ["lw5", "lw420", "lw799"]
