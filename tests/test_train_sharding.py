"""The same training code on 1 CPU device and on 8 (data, data+fsdp, data+tensor, fsdp+tensor) gives the same losses
within float tolerance. Runs in a subprocess because the device count is fixed when JAX starts."""
import json, os, subprocess, sys, textwrap

WORKER = textwrap.dedent('''
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
''')

def test_one_and_eight_devices_agree(tmp_path):
    script = tmp_path / "worker.py"; script.write_text(WORKER)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads([l for l in res.stdout.splitlines() if l.startswith("RESULT")][0][len("RESULT "):])
    ref = out["1 device"]
    assert ref["devices"] == 1
    for name, r in out.items():
        for a, b in zip(r["losses"], ref["losses"]):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (name, r["losses"], ref["losses"])
        assert abs(r["param_sum"] - ref["param_sum"]) <= 1e-4 * ref["param_sum"], name
    assert ref["losses"][-1] < ref["losses"][0]                 # it trains
    # the layouts really are different: fsdp splits the embed dim of wq, tensor its heads dim
    assert out["data=2 fsdp=4"]["wq_spec"] == "P(None, 'fsdp', None)" and out["data=2 fsdp=4"]["wq_shards"] == 4
    assert out["data=4 tensor=2"]["wq_spec"] == "P(None, None, 'tensor')" and out["data=4 tensor=2"]["wq_shards"] == 2
    assert out["fsdp=2 tensor=4"]["wq_shards"] == 8
