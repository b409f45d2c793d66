"""The same training code on 1 CPU device and on 8 (data, data+fsdp, data+tensor, fsdp+tensor) gives the same losses
within float tolerance. Runs in a subprocess because the device count is fixed when JAX starts."""

import os, textwrap
import pytest
from conftest import run_scripts

WORKER = """
    import json, jax, numpy as np
    from marin.models.transformer import LlamaConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training
    assert len(jax.devices()) == 8, jax.devices()
    model = LlamaConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, qk_norm=True)
    meshes = {"1 device": MeshConfig(data=1, devices=1),
              "data=2 fsdp=4": MeshConfig(data=2, fsdp=4), "data=4 tensor=2": MeshConfig(data=4, tensor=2),
              "fsdp=2 tensor=4": MeshConfig(data=1, fsdp=2, tensor=4)}
    out = {}
    for name, mc in meshes.items():
        cfg = TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=64, batch_size=8, seq_len=16), mesh=mc, grad_accum=2,
                          optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0), num_train_steps=4)
        t = setup_training(cfg)
        state, losses = t.init_state(), []
        for i in range(4):
            state, m = t.step(state, t.batch(i))
            losses.append(float(m["loss"]))
        wq = state.params.blocks.wq
        out[name] = {"losses": losses, "devices": t.mesh.size, "wq_spec": str(wq.sharding.spec),
                     "wq_shards": len({str(s.index) for s in wq.addressable_shards}), "param_sum": float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree.leaves(state.params)))}
    print("RESULT", json.dumps(out))
"""


def test_one_and_eight_devices_agree(child):
    out = child["meshes"]
    ref = out["1 device"]
    assert ref["devices"] == 1
    for name, r in out.items():
        for a, b in zip(r["losses"], ref["losses"]):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (name, r["losses"], ref["losses"])
        assert abs(r["param_sum"] - ref["param_sum"]) <= 1e-4 * ref["param_sum"], name
    assert ref["losses"][-1] < ref["losses"][0]  # it trains
    # the layouts really are different: fsdp splits the embed dim of wq, tensor its heads dim
    assert out["data=2 fsdp=4"]["wq_spec"] == "P(None, 'fsdp', None)" and out["data=2 fsdp=4"]["wq_shards"] == 4
    assert out["data=4 tensor=2"]["wq_spec"] == "P(None, None, 'tensor')" and out["data=4 tensor=2"]["wq_shards"] == 2
    assert out["fsdp=2 tensor=4"]["wq_shards"] == 8


RESHARD_WORKER = """
    import json, os, shutil, sys, tempfile, jax, numpy as np
    from marin.models.transformer import LlamaConfig
    from marin.train.checkpoint import CheckpointConfig, list_checkpoints, step_dir
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.models.io import load_model
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, train
    # the model and step of the meshes script (qk_norm, grad_accum=2): its compiled init and steps on these two meshes
    # load from the compilation cache instead of compiling again
    model = LlamaConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, qk_norm=True)
    def cfg(mc): return TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=64, batch_size=8, seq_len=16), mesh=mc, grad_accum=2,
                                    optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0), num_train_steps=4, tracker="disabled",
                                    progress=False, log_every=1, checkpoint=CheckpointConfig(every=2, keep_last=5, format="orbax"))
    root = ROOT
    a, b = os.path.join(root, "a"), os.path.join(root, "b")
    train(cfg(MeshConfig(data=2, fsdp=4)), a)                          # uninterrupted, on data=2 x fsdp=4
    shutil.copytree(a, b); shutil.rmtree(step_dir(os.path.join(b, "checkpoints"), 4))   # as if killed after step 2's save
    s = train(cfg(MeshConfig(data=1, fsdp=2, tensor=4)), b)            # resumed on another layout
    hist = lambda d: [json.loads(l)["loss"] for l in open(os.path.join(d, "history.jsonl"))]
    pa, pb = (jax.tree.leaves(load_model(d)[0]) for d in (a, b))
    ck = step_dir(os.path.join(a, "checkpoints"), 4)
    print("RESULT", json.dumps({"resumed_from": s["train/resumed_from"], "loss_a": hist(a), "loss_b": hist(b),
                                "max_param_diff": max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(pa, pb)),
                                "files": sorted(os.listdir(os.path.join(ck, "state.orbax"))), "ckpts": [s for s, _ in list_checkpoints(os.path.join(b, "checkpoints"))]}))
"""


def test_orbax_checkpoint_resumes_on_another_mesh(child):
    "format='orbax': saved on data=2 x fsdp=4, resumed on fsdp=2 x tensor=4; the run ends where the uninterrupted one did."
    out = child["reshard"]
    assert out["resumed_from"] == 2 and out["ckpts"] == [2, 4]
    assert len(out["loss_a"]) == len(out["loss_b"]) == 4
    for x, y in zip(out["loss_a"], out["loss_b"]):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(x)), (out["loss_a"], out["loss_b"])
    assert out["max_param_diff"] < 1e-5, out["max_param_diff"]
    assert "ocdbt.process_0" in out["files"], out["files"]  # each process writes its own shard files


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    "Both scripts in one 8-device child process (tests/conftest.py: run_scripts)."
    root = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, MARIN_TRACKER="disabled")
    return run_scripts(
        {"meshes": WORKER, "reshard": f"ROOT = {str(root)!r}\n" + textwrap.dedent(RESHARD_WORKER)}, env=env
    )
