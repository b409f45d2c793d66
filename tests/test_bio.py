"The smallest DNA path end to end: FASTA import -> token shards -> mixture (rc augmentation) -> trainer -> eval.bio."

import os

import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")


# ~40 s on two shared cores, almost all of it XLA compiling the train and scoring steps: over the suite's budget
@pytest.mark.slow
def test_dna_steps_train_and_variant_score(tmp_path):
    "Trained on human mtDNA, scored on chimp: beats a uniform guess, and the variant score finds a planted CpG block."
    from marin.core.executor import Executor
    from marin.core.settings import shared_data_dir
    from marin.data.sources import SourceConfig, import_step, read_document_table
    from marin.data.shards import TokenizeConfig, tokenize_step
    from marin.data.mixture import MixtureConfig, MixtureComponent
    from marin.data.tokenizers import dna_tokenizer, DNA_ALPHABET
    from marin.models.transformer import LlamaConfig
    from marin.models.io import load_model
    from marin.train.trainer import TrainConfig, train_step
    from marin.train.optim import OptimizerConfig
    from marin.train.checkpoint import CheckpointConfig
    from marin.eval.bio import fit_markov, markov_bits, model_bits, window_logliks, variant_llr, auroc_ci

    dna = shared_data_dir() / "dna"
    ex = Executor(str(tmp_path / "store"), verbose=False)
    train_docs = import_step(SourceConfig("mt_human", (str(dna / "MT-human.fa"),), format="fasta"))
    held_docs = import_step(SourceConfig("mt_chimp", (str(dna / "MT-chimp.fa"),), format="fasta"))
    tokens = tokenize_step(TokenizeConfig(train_docs, "dna"), "tokens/mt_human")
    mix = MixtureConfig((MixtureComponent("mt", tokens),), seq_len=64, batch_size=8, sample="dna", rc_prob=0.5)
    tok = dna_tokenizer(1)
    model_cfg = LlamaConfig(
        vocab_size=tok.vocab_size, seq_len=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64
    )
    cfg = TrainConfig(
        model=model_cfg,
        data=mix,
        num_train_steps=60,
        progress=False,
        tracker="disabled",
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup=10),
        checkpoint=CheckpointConfig(every=60, async_write=False),
    )
    train = train_step(cfg, "dna/tiny")
    out = ex.run([train, held_docs])
    model, _ = load_model(out[train])
    held = read_document_table(out[held_docs], ["text"]).column("text").to_pylist()[0][:1920]
    human = read_document_table(out[train_docs], ["text"]).column("text").to_pylist()
    bits = model_bits(model, tok, [held], window=60, max_len=64)
    order0 = markov_bits(fit_markov(human, DNA_ALPHABET, 0, reverse_complement=True), [held])
    # trained on human mtDNA, the model is far from its untrained log2(7) = 2.8 bits and near the composition baseline
    assert bits < 2.0 and bits < order0 + 0.05, (bits, order0)
    # a planted easy task: one random substitution vs a CpG block written over the window (CpG is rare in mtDNA)
    rng = np.random.default_rng(0)
    refs = [held[i : i + 60] for i in range(0, 1800, 60)]
    single = [r[:30] + "ACGT"[("ACGT".index(r[30]) + 1 + rng.integers(3)) % 4] + r[31:] for r in refs]
    planted = [r[:20] + "CG" * 10 + r[40:] for r in refs]
    score = lambda w: window_logliks(model, tok, w, max_len=64)
    res = auroc_ci(variant_llr(score, refs, single), variant_llr(score, refs, planted), n_boot=200)
    assert res.auc > 0.9, res
