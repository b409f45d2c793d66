"Mixtures over real shared data: shares within 1% over 1M tokens, resume from a step, stable hashes, errors before work."

import numpy as np, pytest
from marin.core.executor import Executor
from marin.core.settings import shared_data_dir
from marin.data.sources import SourceConfig, import_step
from marin.data.shards import TokenizeConfig, tokenize_step, tokenize_documents
from marin.data.mixture import (
    MixtureConfig,
    MixtureComponent,
    MixtureLoader,
    MixtureStepConfig,
    mixture_step,
    describe_mixture,
)
from marin.data.permutation import FeistelPermutation


@pytest.fixture(scope="module")
def dna_sets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix")
    ex = Executor(str(tmp / "store"), verbose=False)
    dna = shared_data_dir() / "dna"
    srcs = {
        "mito": ("MT-*.fa",),
        "phage": ("lambda_NC_001416.fasta", "hiv1_NC_001802.fna"),
        "bact": ("mycoplasma_genitalium_G37_L43967.fa",),
    }
    steps = {}
    for name, pats in srcs.items():
        docs = import_step(SourceConfig(name, tuple(str(dna / p) for p in pats), format="fasta", split="file"))
        steps[name] = tokenize_step(TokenizeConfig(docs, "dna", docs_per_shard=1), f"tokens/{name}")
    ex.run(list(steps.values()))
    return ex, steps, tmp


def _cfg(ex, steps, unit="tokens", w=(0.5, 0.3, 0.2), **kw):
    return MixtureConfig(
        tuple(MixtureComponent(n, ex.output_path(s), wt) for (n, s), wt in zip(steps.items(), w)),
        weight_unit=unit,
        sample="dna",
        **kw,
    )


def test_realised_shares_within_1pct_over_1M_tokens(dna_sets):
    ex, steps, _ = dna_sets
    ld = MixtureLoader(_cfg(ex, steps, seq_len=512, batch_size=16, block_rows=64))
    n_steps = 1_000_000 // (16 * 512) + 1
    counts = np.zeros(3)
    for s in range(n_steps):
        _, _, comp = ld.rows(s * 16, 16)
        counts += np.bincount(comp, minlength=3) * 512
    share = counts / counts.sum()
    assert counts.sum() >= 1_000_000
    assert np.abs(share - np.array([0.5, 0.3, 0.2])).max() < 0.01, share
    m = ld.metrics(n_steps - 1)
    assert abs(m["mixture/share/mito"] - share[0]) < 1e-9
    assert (
        m["mixture/epoch/mito"] > 1 and m["mixture/epoch/bact"] == 1
    )  # the small source repeated, the big one did not


def test_bytes_and_document_weights_convert(dna_sets):
    ex, steps, _ = dna_sets
    ld_b = MixtureLoader(_cfg(ex, steps, unit="bytes", seq_len=64))
    ld_d = MixtureLoader(_cfg(ex, steps, unit="documents", seq_len=64))
    # DNA is one token per byte (+1 eos per document): byte shares ≈ token shares; per-document weights favour long docs
    assert abs(ld_b.shares["mito"] - 0.5) < 0.01
    per_doc = {n: ld_d.sets[n].n_tokens / len(ld_d.sets[n]) for n in ld_d.names}
    raw = {n: w * per_doc[n] for n, w in zip(ld_d.names, (0.5, 0.3, 0.2))}
    assert abs(ld_d.shares["bact"] - raw["bact"] / sum(raw.values())) < 1e-12 and ld_d.shares["bact"] > 0.8


def test_resume_from_step_matches_uninterrupted(dna_sets):
    ex, steps, _ = dna_sets
    cfg = _cfg(ex, steps, seq_len=256, batch_size=8, block_rows=16, rc_prob=0.5)
    it = MixtureLoader(cfg).iter_from(0)
    straight = [next(it) for _ in range(30)]
    resumed_it = MixtureLoader(cfg).iter_from(17)  # a new process, told only the step number
    for k in range(17, 30):
        b = next(resumed_it)
        for key in ("tokens", "segment_ids", "loss_mask"):
            assert np.array_equal(b[key], straight[k][key]), (k, key)
    b = straight[3]
    # the contract: loss_mask is 1 exactly where the next token is in the same document
    seg = b["segment_ids"]
    assert (
        np.array_equal(b["loss_mask"][:, :-1] == 1, (seg[:, :-1] == seg[:, 1:]) & (seg[:, :-1] > 0))
        and (b["loss_mask"][:, -1] == 0).all()
    )


def test_mixture_hash_stable_across_runs_and_workers(dna_sets, tmp_path):
    ex, steps, tmp = dna_sets
    d1 = describe_mixture(MixtureStepConfig(_cfg(ex, steps, seq_len=128), planned_steps=50))
    # re-tokenize one component with 2 workers into another folder: same token set, same mixture hash
    alt = tmp_path / "mito2"
    docs_path = ex.output_path(steps["mito"].config.documents)
    tokenize_documents(TokenizeConfig(docs_path, "dna", docs_per_shard=1, workers=2), str(alt))
    comps = list(_cfg(ex, steps, seq_len=128).components)
    comps[0] = MixtureComponent("mito", str(alt), 0.5)
    d2 = describe_mixture(
        MixtureStepConfig(_cfg(ex, steps, seq_len=128).replace(components=tuple(comps)), planned_steps=50)
    )
    assert (
        d1["batch_hash"] == d2["batch_hash"]
        and d1["components"][0]["token_set_hash"] == d2["components"][0]["token_set_hash"]
    )
    step = mixture_step(MixtureStepConfig(_cfg(ex, steps, seq_len=128), planned_steps=50))
    out = ex.run([step])[step]
    import json

    assert json.load(open(f"{out}/mixture.json"))["batch_hash"] == d1["batch_hash"]


def test_permutation_bijection_awkward_sizes():
    for n in (1, 2, 3, 1000003):
        p = FeistelPermutation(n, seed=123)(np.arange(n))
        assert np.array_equal(np.sort(p), np.arange(n))


def test_errors_before_work(dna_sets, tmp_path):
    ex, steps, _ = dna_sets
    with pytest.raises(ValueError, match="positive"):
        _cfg(ex, steps, w=(0, 0, 0))
    with pytest.raises(FileNotFoundError, match="ghost"):
        MixtureLoader(MixtureConfig((MixtureComponent("ghost", str(tmp_path / "none")),), sample="dna"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_step(SourceConfig("gone", (str(tmp_path / "missing.fa"),)))
