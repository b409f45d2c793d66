"The Sample interface over the shared DNA and protein FASTA files, through token shards and the mixture loader."

import numpy as np, pytest
from marin.core.executor import Executor
from marin.core.settings import shared_data_dir
from marin.data.sources import SourceConfig, import_step
from marin.data.shards import TokenizeConfig, tokenize_step
from marin.data.mixture import (
    MixtureConfig,
    MixtureComponent,
    MixtureLoader,
    MixtureStepConfig,
    mixture_step,
    load_mixture,
)
from marin.data.sample import DNASample, ProteinSample, sample_for


def _run(tmp_path, name, pattern, tok):
    ex = Executor(str(tmp_path / "store"), verbose=False)
    docs = import_step(SourceConfig(name, (str(shared_data_dir() / name / pattern),), format="fasta"))
    t = tokenize_step(TokenizeConfig(docs, tok, docs_per_shard=256), f"tokens/{name}")
    return ex, ex.run([t])[t]


def test_protein_batches(tmp_path):
    ex, path = _run(tmp_path, "protein", "sprot_archaea.prokka.fasta", "protein")
    ld = MixtureLoader(MixtureConfig((MixtureComponent("prot", path),), sample="protein", seq_len=256, batch_size=4))
    b = ld.batch(3)
    assert ld.vocab_size == ProteinSample().vocab_size and b["tokens"].max() < ld.vocab_size
    text = ProteinSample().tokenizer.decode(b["tokens"][0])
    assert set(text.replace("<|endoftext|>", "")) <= set("ACDEFGHIKLMNPQRSTVWYXBZUO*")
    # proteins are short: rows hold several documents, each numbered, and the loss never crosses a boundary
    seg = b["segment_ids"]
    cross = np.zeros_like(b["loss_mask"], bool)
    cross[:, :-1] = seg[:, :-1] != seg[:, 1:]
    assert seg.max() > 1 and (b["loss_mask"][cross] == 0).all()


def test_dna_kmers_and_reverse_complement(tmp_path):
    ex, path = _run(tmp_path, "dna", "MT-*.fa", "dna:k=3")
    cfg = MixtureConfig((MixtureComponent("mt", path),), sample="dna:k=3", seq_len=128, batch_size=4, rc_prob=1.0)
    plain = MixtureLoader(cfg.replace(rc_prob=0.0)).batch(2)
    rc = MixtureLoader(cfg).batch(2)
    s = DNASample(k=3)
    assert MixtureLoader(cfg).vocab_size == 2 + 64 + 1
    # every fragment of the rc batch is the reverse complement of the plain one
    for r in range(4):
        for seg in np.unique(plain["segment_ids"][r]):
            w = plain["segment_ids"][r] == seg
            assert np.array_equal(rc["tokens"][r][w], s.reverse_complement(plain["tokens"][r][w]))
    comp = {"A": "T", "C": "G", "G": "C", "T": "A"}
    frag = s.tokenizer.decode(plain["tokens"][0][:20])
    frag_rc = s.tokenizer.decode(s.reverse_complement(plain["tokens"][0][:20]))
    if "<" not in frag:
        assert frag_rc == "".join(comp.get(c, c) for c in reversed(frag))


def test_mixture_step_reopens(tmp_path):
    ex, path = _run(tmp_path, "dna", "lambda_NC_001416.fasta", "dna")
    cfg = MixtureConfig((MixtureComponent("lambda", path),), sample="dna", seq_len=64, batch_size=2)
    out = ex.run([mixture_step(MixtureStepConfig(cfg, planned_steps=10))])
    ld = load_mixture(list(out.outputs.values())[-1])
    assert np.array_equal(ld.batch(9)["tokens"], MixtureLoader(cfg).batch(9)["tokens"])
    with pytest.raises(ValueError, match="sample kind"):
        sample_for("rna")
