"Token shards from a BPE trained on the shared prose: identical across runs and across 1 vs 2 workers; corruption named."

import json, pathlib
import pytest
from marin.core.executor import Executor
from marin.core.settings import shared_data_dir
from marin.data.sources import SourceConfig, import_step
from marin.data.tokenizers import BPETrainConfig, train_bpe_step, load_tokenizer
from marin.data.shards import TokenizeConfig, tokenize_step, tokenize_documents, TokenSet, CorruptShardError, MANIFEST


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    ex = Executor(str(tmp / "store"), verbose=False)
    docs = import_step(
        SourceConfig(
            "prose",
            (str(shared_data_dir() / "text" / "tinyshakespeare.txt"),),
            split="paragraphs",
            max_chars=2000,
            limit=600,
        )
    )
    bpe = train_bpe_step(BPETrainConfig(docs, vocab_size=1024))
    tok1 = tokenize_step(TokenizeConfig(docs, bpe, docs_per_shard=128, workers=1), "tokens/prose")
    r = ex.run([tok1])
    return ex, docs, bpe, tok1, r, tmp


@pytest.mark.parametrize("workers", [2, 4])
def test_one_vs_more_workers_byte_identical(pipeline, workers):
    ex, docs, bpe, tok1, r, tmp = pipeline
    out1 = pathlib.Path(r[tok1])
    out2 = tmp / f"workers{workers}"
    tokenize_documents(
        TokenizeConfig(ex.output_path(docs), ex.output_path(bpe), docs_per_shard=128, workers=workers), str(out2)
    )
    m1, m2 = json.loads((out1 / MANIFEST).read_text()), json.loads((out2 / MANIFEST).read_text())
    assert m1 == m2 and len(m1["shards"]) == 5 and m1["documents"] == 600
    for s in m1["shards"]:
        assert (out1 / s["file"]).read_bytes() == (out2 / s["file"]).read_bytes()
    if workers == 4:
        return
    # and a second run of the whole chain in a fresh store gives the same set hash
    ex2 = Executor(str(tmp / "store2"), verbose=False)
    assert TokenSet(ex2.run([tok1])[tok1]).hash == m1["hash"]


def test_random_access_roundtrip(pipeline):
    ex, docs, bpe, tok1, r, tmp = pipeline
    ts = TokenSet(r[tok1])
    tok = load_tokenizer(ex.output_path(bpe))
    from marin.data.sources import read_documents

    texts = [d["text"] for d in read_documents(ex.output_path(docs))]
    for i in (0, 127, 128, 599):
        ids = ts.doc_tokens(i)
        assert ids[-1] == tok.eos_id and tok.decode(ids[:-1]) == texts[i]
    assert ts.manifest["tokenizer"]["hash"] == tok.hash and ts.vocab_size == tok.vocab_size
    assert ts.manifest["bytes"] == sum(len(t.encode()) for t in texts)


def test_corrupt_shard_named(pipeline, tmp_path):
    ex, docs, bpe, tok1, r, tmp = pipeline
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(r[tok1], copy)
    f = copy / "shard-00003.arrow"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptShardError, match="shard-00003.arrow"):
        TokenSet(str(copy))
    f.unlink()
    with pytest.raises(CorruptShardError, match="shard-00003.arrow.*missing"):
        TokenSet(str(copy))
