"Expert parallelism: the MoE model on 8 CPU devices (experts sharded, all-to-all) equals 1 device."

import pytest
from conftest import run_scripts

SCRIPT = """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from marin.models.transformer import LlamaConfig, init, next_token_loss
    from marin.models.moe import MoEConfig
    from marin.models.layers import ActivationSharding
    assert len(jax.devices()) == 8
    out = {}
    for balance in ("quantile",):
        cfg = LlamaConfig(vocab_size=32, seq_len=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=24,
                          moe=MoEConfig(n_experts=8, top_k=2, balance=balance, balance_groups=8, n_shared_experts=1))
        model = init(cfg, key=jax.random.PRNGKey(0))
        toks = jax.random.randint(jax.random.PRNGKey(1), (8, 16), 0, 32)
        batch = {"tokens": toks, "loss_mask": jnp.ones((8, 16))}
        mesh = Mesh(np.array(jax.devices()), ("expert",))
        ep = ActivationSharding(mesh=mesh, expert_axis="expert")  # passed explicitly, no context
        # 1 device: no sharding, so the jitted program runs on the first device alone; 8: experts over the expert axis
        for name, f in {"1": lambda m: next_token_loss(m, batch), "8": lambda m: next_token_loss(m, batch, sharding=ep)}.items():
            (loss, aux), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(model)
            assert len(loss.sharding.device_set) == int(name), loss.sharding
            out[f"{name}/{balance}"] = {"loss": float(loss), "bias": np.asarray(aux["moe_bias_next"]).tolist(),
                                        "cv": float(aux["moe/load_cv"]), "grad": [np.asarray(x).ravel()[:50].tolist() for x in jax.tree.leaves(grads)]}
    print("RESULT", json.dumps(out))
"""


def test_one_vs_eight_devices_agree(child):
    import numpy as np

    out = child["one_vs_eight"]
    for bal in ("quantile",):
        a, b = out[f"1/{bal}"], out[f"8/{bal}"]
        assert abs(a["loss"] - b["loss"]) < 1e-5, bal
        assert abs(a["cv"] - b["cv"]) < 1e-5, bal
        assert np.allclose(a["bias"], b["bias"], atol=1e-5), bal
        for x, y in zip(a["grad"], b["grad"]):
            assert np.allclose(x, y, atol=1e-5), bal


TRAIN_SCRIPT = """
    import json, jax, numpy as np
    from marin.models.transformer import LlamaConfig
    from marin.models.moe import MoEConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training
    assert len(jax.devices()) == 8
    model = LlamaConfig(vocab_size=32, seq_len=16, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24,
                        moe=MoEConfig(n_experts=8, top_k=2, d_expert=16, balance="quantile", balance_groups=8))
    out = {}
    for name, mc in {"1 device": MeshConfig(data=1, devices=1), "fsdp=2 expert=4": MeshConfig(data=1, fsdp=2, expert=4)}.items():
        cfg = TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=32, batch_size=8, seq_len=16), mesh=mc,
                          optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0), num_train_steps=3)
        t = setup_training(cfg)
        state, losses = t.init_state(), []
        for i in range(3):
            state, m = t.step(state, t.batch(i))
            losses.append(float(m["loss"]))
        eg = state.params.blocks.moe.expert_gate
        hlo = t.step.lower(state, t.batch(3)).as_text()
        out[name] = {"losses": losses, "cv": float(m["moe/load_cv"]), "bias": np.asarray(state.params.blocks.moe.router_bias).tolist(),
                     "expert_spec": str(eg.sharding.spec), "all_to_all": "all_to_all" in hlo or "all-to-all" in hlo}
    print("RESULT", json.dumps(out))
"""


def test_expert_mesh_axis_in_the_trainer_agrees_with_one_device(child):
    "MeshConfig(expert=n) alone turns on expert parallelism in the trainer; 8 devices give the 1-device numbers."
    import numpy as np

    out = child["trainer"]
    ref = out["1 device"]
    assert not ref["all_to_all"] and ref["losses"][-1] < ref["losses"][0]
    for name in ("fsdp=2 expert=4",):  # batch over expert x fsdp, expert weights' embed over fsdp
        o = out[name]
        assert o["all_to_all"], name  # the expert-parallel path ran
        assert "expert" in o["expert_spec"], (name, o["expert_spec"])  # experts live on the expert axis
        assert np.allclose(o["losses"], ref["losses"], atol=1e-5), (name, o["losses"], ref["losses"])
        assert abs(o["cv"] - ref["cv"]) < 1e-4 and np.allclose(o["bias"], ref["bias"], atol=1e-5), name


@pytest.fixture(scope="module")
def child():
    "Both scripts in one 8-device child process (tests/conftest.py: run_scripts)."
    return run_scripts({"one_vs_eight": SCRIPT, "trainer": TRAIN_SCRIPT})
