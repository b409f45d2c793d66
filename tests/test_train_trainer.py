"""Trainer behaviour through the executor: a NaN in the batch stops the run and the ledger records FAILED with the
reason; a checkpoint of another model is refused naming the fields; gradient accumulation equals the full batch;
divergence stops the run."""

import dataclasses, json, os
import jax, jax.numpy as jnp, numpy as np
import pytest
from marin.core.executor import Executor, StepFailed, read_status
from marin.core.ledger import Ledger
from marin.models.transformer import LlamaConfig
from marin.train.checkpoint import CheckpointConfig, CheckpointMismatch, latest_checkpoint
from marin.train.optim import OptimizerConfig, build_optimizer
from marin.train.sharding import make_mesh
from marin.train.trainer import (
    CharDataConfig,
    TrainConfig,
    TrainingFailed,
    build_loader,
    device_batch,
    init_state,
    make_train_step,
    state_shardings,
    train,
    train_step,
)

MODEL = LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64)


@dataclasses.dataclass(frozen=True)
class NaNCharData(CharDataConfig):
    "Character data with a NaN written into the loss mask of step `nan_at`."

    nan_at: int = -1

    def build(self):
        ld = super().build()
        clean = ld.batch

        def batch(step):
            b = clean(step)
            if step == self.nan_at:
                b["loss_mask"] = b["loss_mask"].copy()
                b["loss_mask"][0, 2] = np.nan
            return b

        ld.batch = batch
        return ld


def _cfg(**kw):
    base = dict(
        model=MODEL,
        data=NaNCharData(batch_size=8, seq_len=32),
        num_train_steps=12,
        progress=False,
        log_every=4,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=2),
        checkpoint=CheckpointConfig(every=4),
    )
    return TrainConfig(**{**base, **kw})


def test_nan_is_caught_and_recorded_as_failed(lab):
    cfg = _cfg(data=NaNCharData(batch_size=8, seq_len=32, nan_at=6), tracker="offline")
    step = train_step(cfg, "train/nan")
    ex = Executor(str(lab / "store"), verbose=False)
    with pytest.raises(StepFailed):
        ex.run([step])
    out = ex.output_path(step)
    st = read_status(out)
    assert st["status"] == "FAILED" and "step 6" in st["error"] and "not finite" in st["error"]
    rec = Ledger(str(lab / "store" / "ledger")).sql(
        "select status, error, tracker_url from runs where status = 'FAILED'"
    )
    rows = rec.fetchall() if hasattr(rec, "fetchall") else rec.values.tolist()
    assert len(rows) == 1 and "TrainingFailed" in rows[0][1] and "step 6" in rows[0][1] and rows[0][2]
    assert latest_checkpoint(os.path.join(out, "checkpoints"))[0] == 4  # the last good checkpoint is kept
    hist = [json.loads(l) for l in open(os.path.join(out, "history.jsonl"))]
    assert [h["step"] for h in hist] == list(range(7)) and not np.isfinite(hist[-1]["loss"])


def test_mismatched_checkpoint_is_refused_naming_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    out = str(tmp_path / "run")
    train(_cfg(num_train_steps=4), out)
    with pytest.raises(CheckpointMismatch) as e:
        train(_cfg(num_train_steps=8, model=MODEL.replace(n_layers=3, d_ff=48)), out)
    msg = str(e.value)
    assert "n_layers: checkpoint 2 vs run 3" in msg and "d_ff: checkpoint 64 vs run 48" in msg
    from marin.train.cli import dry_run  # the dry run finds it too, before compiling

    report = dry_run(_cfg(model=MODEL.replace(n_layers=3)), output_path=out)
    assert not report.ok and "n_layers" in str(report)


def test_gradient_accumulation_equals_full_batch():
    def one(accum):
        c = _cfg(grad_accum=accum, num_train_steps=1)
        opt, sched = build_optimizer(c.optimizer, 1)
        mesh = make_mesh(c.mesh)
        st = init_state(c, mesh, opt)
        b = build_loader(c.data).batch(0)
        b["loss_mask"][:, 10:] = 0
        b["loss_mask"][0, :] = 0  # uneven token counts per microbatch
        st, m = make_train_step(c, mesh, opt, sched, state_shardings(c, mesh, opt))(
            st, device_batch(b, mesh, accum, c.mesh.rules)
        )
        return float(m["loss"]), st.params

    (l1, p1), (l4, p4) = one(1), one(4)
    assert abs(l1 - l4) < 1e-5
    assert max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p4))) < 1e-5


def test_divergence_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    cfg = _cfg(
        optimizer=OptimizerConfig(learning_rate=5.0, warmup=0, max_grad_norm=0),
        divergence_factor=1.5,
        num_train_steps=20,
    )
    with pytest.raises(TrainingFailed, match="diverged|not finite"):
        train(cfg, str(tmp_path / "div"))


def test_out_of_range_tokens_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    with pytest.raises(ValueError, match="vocab_size"):
        train(_cfg(model=MODEL.replace(vocab_size=40)), str(tmp_path / "v"))


def test_trains_on_a_mixture_of_token_sets_through_the_executor(lab, monkeypatch):
    "The data pipeline's steps feed the trainer: import -> tokenize -> (mixture config) -> train, one DAG."
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    from marin.core.settings import shared_data_dir
    from marin.core.tracking import read_metrics
    from marin.data.sources import SourceConfig, import_step
    from marin.data.shards import TokenizeConfig, tokenize_step
    from marin.data.mixture import MixtureConfig, MixtureComponent

    dna = shared_data_dir() / "dna"
    toks = {}
    for name, pats in {"mito": ("MT-*.fa",), "phage": ("lambda_NC_001416.fasta",)}.items():
        docs = import_step(SourceConfig(name, tuple(str(dna / p) for p in pats), format="fasta", split="file"))
        toks[name] = tokenize_step(TokenizeConfig(docs, "dna", docs_per_shard=1), f"tokens/{name}")
    mix = MixtureConfig(
        tuple(MixtureComponent(n, s, 0.5) for n, s in toks.items()),
        seq_len=32,
        batch_size=4,
        sample="dna",
        block_rows=16,
    )
    cfg = _cfg(
        data=mix,
        model=MODEL.replace(vocab_size=16),
        num_train_steps=6,
        eval_data=(("mito", MixtureConfig(mix.components[:1], seq_len=32, batch_size=4, sample="dna", block_rows=16)),),
        eval_batches=1,
        log_every=3,
    )
    step = train_step(cfg, "train/dna")
    ex = Executor(str(lab / "store"), verbose=False)
    ex.run([step])
    out = ex.output_path(step)
    m = read_metrics(out)
    assert "mixture/share/mito" in m.columns and np.isfinite(m["eval/mito/bpb"].dropna().iloc[-1])
    assert latest_checkpoint(os.path.join(out, "checkpoints"))[0] == 6
