"""AdamH and Muon through the real trainer (`OptimizerConfig(name=...)`): a tiny model's loss goes down; a run resumed
from a mid-run checkpoint ends bit-identical to the uninterrupted one (parameters, both parts' optimizer state, step,
key) with the same loss curve, in both checkpoint formats; and on 8 CPU devices the sharded runs agree with one device,
keep each moment sharded like its weight, and resume (orbax) on another mesh where the uninterrupted run ended."""

import json, os, shutil, textwrap
import pytest
from conftest import run_scripts
from marin.models.transformer import LlamaConfig
from marin.train.checkpoint import CheckpointConfig, list_checkpoints, step_dir
from marin.train.optim import OptimizerConfig
from marin.train.trainer import CharDataConfig, TrainConfig, final_params_hash, train

OPTIMIZERS = {
    "adamh": OptimizerConfig(name="adamh", learning_rate=0.05, adam_lr=3e-3, warmup=2, schedule="wsd"),
    "muon": OptimizerConfig(name="muon", learning_rate=0.05, adam_lr=3e-3, warmup=2, schedule="wsd"),
}


def _cfg(opt: OptimizerConfig, fmt: str) -> TrainConfig:
    return TrainConfig(
        model=LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64),
        data=CharDataConfig(batch_size=8, seq_len=32),
        num_train_steps=12,
        optimizer=opt,
        tracker="disabled",
        progress=False,
        log_every=1,
        checkpoint=CheckpointConfig(every=4, keep_last=5, format=fmt),
    )


def _losses(out) -> list[float]:
    return [json.loads(l)["loss"] for l in open(out / "history.jsonl")]


@pytest.mark.parametrize("name,fmt", [("adamh", "safetensors"), ("muon", "orbax")])
def test_trains_and_resumes_bit_exact(name, fmt, tmp_path):
    cfg = _cfg(OPTIMIZERS[name], fmt)
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    train(cfg, str(ref))
    losses = _losses(ref)
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < losses[0] - 0.3, losses  # it learns
    # the output of a run killed after step 4's checkpoint: steps 8 and 12 never written
    shutil.copytree(ref, cut)
    for s in (8, 12):
        shutil.rmtree(step_dir(str(cut / "checkpoints"), s))
    summary = train(cfg, str(cut))
    assert summary["train/resumed_from"] == 4
    assert [s for s, _ in list_checkpoints(str(cut / "checkpoints"))] == [4, 8, 12]
    assert final_params_hash(str(cut)) == final_params_hash(str(ref))  # params, optimizer state, step, key: same bits
    assert (cut / "history.jsonl").read_text() == (ref / "history.jsonl").read_text()  # the same loss curve


WORKER = """
    import json, jax, numpy as np, optax
    from marin.models.transformer import LlamaConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training
    assert len(jax.devices()) == 8, jax.devices()
    model = LlamaConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, qk_norm=True)
    opts = {"adamh": OptimizerConfig(name="adamh", learning_rate=0.05, adam_lr=1e-2, warmup=0),
            "muon": OptimizerConfig(name="muon", learning_rate=0.05, adam_lr=1e-2, warmup=0)}
    meshes = {"1 device": MeshConfig(data=1, devices=1), "fsdp=2 tensor=4": MeshConfig(data=1, fsdp=2, tensor=4)}
    spec = lambda x: str(x.sharding.spec)
    out = {}
    for oname, opt in opts.items():
        for mname, mc in meshes.items():
            cfg = TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=64, batch_size=8, seq_len=16), mesh=mc,
                              grad_accum=2, optimizer=opt, num_train_steps=4)
            t = setup_training(cfg)
            state, losses = t.init_state(), []
            for i in range(4):
                state, m = t.step(state, t.batch(i))
                losses.append(float(m["loss"]))
            chain = state.opt_state[1].inner_states  # [0] is the clipping's state
            matrix, adam = chain["matrix"].inner_state[0], chain["adam"].inner_state[0]
            r = {"losses": losses, "wq": spec(state.params.blocks.wq), "embed": spec(state.params.embed),
                 "adam_nu_embed": spec(adam.nu.embed), "adam_wq": type(adam.nu.blocks.wq).__name__,
                 "matrix_mu_wq": spec(matrix.mu.blocks.wq), "matrix_mu_embed": type(matrix.mu.embed).__name__,
                 "params": [np.asarray(x).tolist() for x in jax.tree.leaves(state.params.blocks.wq)]}
            if oname == "adamh":
                hb = chain["matrix"].inner_state[1]
                r["norms_wq"] = [spec(hb.norms.blocks.wq), list(hb.norms.blocks.wq.shape)]
                r["wq_norm_ratio"] = (np.linalg.norm(np.asarray(state.params.blocks.wq), axis=(1, 2))
                                      / np.asarray(hb.norms.blocks.wq)[:, 0, 0]).tolist()
            out[f"{oname} {mname}"] = r
    print("RESULT", json.dumps(out))
"""

RESHARD_WORKER = """
    import json, os, shutil, jax, numpy as np
    from marin.models.io import load_model
    from marin.models.transformer import LlamaConfig
    from marin.train.checkpoint import CheckpointConfig, step_dir
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, train
    model = LlamaConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    opt = OptimizerConfig(name="adamh", learning_rate=0.05, adam_lr=1e-2, warmup=0)
    def cfg(mc): return TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=64, batch_size=8, seq_len=16), mesh=mc,
                                    optimizer=opt, num_train_steps=4, tracker="disabled", progress=False, log_every=1,
                                    checkpoint=CheckpointConfig(every=2, keep_last=5, format="orbax"))
    a, b = os.path.join(ROOT, "a"), os.path.join(ROOT, "b")
    train(cfg(MeshConfig(data=2, fsdp=4)), a)
    shutil.copytree(a, b); shutil.rmtree(step_dir(os.path.join(b, "checkpoints"), 4))  # as if killed after step 2's save
    s = train(cfg(MeshConfig(data=1, fsdp=2, tensor=4)), b)  # resumed on another layout
    hist = lambda d: [json.loads(l)["loss"] for l in open(os.path.join(d, "history.jsonl"))]
    pa, pb = (jax.tree.leaves(load_model(d)[0]) for d in (a, b))
    print("RESULT", json.dumps({"resumed_from": s["train/resumed_from"], "loss_a": hist(a), "loss_b": hist(b),
                                "max_param_diff": max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(pa, pb))}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    "Both scripts in one 8-device child process (tests/conftest.py: run_scripts)."
    root = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, MARIN_TRACKER="disabled")
    return run_scripts(
        {"meshes": WORKER, "reshard": f"ROOT = {str(root)!r}\n" + textwrap.dedent(RESHARD_WORKER)}, env=env
    )


@pytest.mark.parametrize("name", ["adamh", "muon"])
def test_eight_devices_agree_with_one_and_shard_the_state(child, name):
    import numpy as np

    one, eight = child["meshes"][f"{name} 1 device"], child["meshes"][f"{name} fsdp=2 tensor=4"]
    for a, b in zip(eight["losses"], one["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (eight["losses"], one["losses"])
    assert np.abs(np.asarray(eight["params"]) - np.asarray(one["params"])).max() < 1e-5
    assert one["losses"][-1] < one["losses"][0]
    # each moment lives where its weight does; the other group's slot is an empty MaskedNode
    assert eight["wq"] == eight["matrix_mu_wq"] == "P(None, 'fsdp', 'tensor')", eight
    assert eight["embed"] == eight["adam_nu_embed"] == "P('tensor', 'fsdp')", eight
    assert eight["adam_wq"] == eight["matrix_mu_embed"] == "MaskedNode"
    if name == "adamh":  # one norm per layer, replicated; the weights still have it after 4 steps
        assert eight["norms_wq"] == ["P()", [2, 1, 1]]
        assert max(abs(x - 1) for x in eight["wq_norm_ratio"]) < 1e-6, eight["wq_norm_ratio"]


def test_adamh_orbax_checkpoint_resumes_on_another_mesh(child):
    "Saved on data=2 x fsdp=4, resumed on fsdp=2 x tensor=4: the run ends where the uninterrupted one did."
    out = child["reshard"]
    assert out["resumed_from"] == 2 and len(out["loss_a"]) == len(out["loss_b"]) == 4
    for x, y in zip(out["loss_a"], out["loss_b"]):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(x)), (out["loss_a"], out["loss_b"])
    assert out["max_param_diff"] < 1e-5, out["max_param_diff"]
