"Expert parallelism: the MoE model on 8 CPU devices (experts sharded, all-to-all) equals 1 device."
import os, subprocess, sys, textwrap

SCRIPT = textwrap.dedent('''
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from marin.models.transformer import LlamaConfig, init, next_token_loss
    from marin.models.moe import MoEConfig
    from marin.models.moe_parallel import expert_parallel
    n = len(jax.devices())
    out = {}
    for balance in ("quantile",):
        cfg = LlamaConfig(vocab_size=32, seq_len=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=24,
                          moe=MoEConfig(n_experts=8, top_k=2, balance=balance, balance_groups=8, n_shared_experts=1))
        model = init(cfg, key=jax.random.PRNGKey(0))
        toks = jax.random.randint(jax.random.PRNGKey(1), (8, 16), 0, 32)
        batch = {"tokens": toks, "loss_mask": jnp.ones((8, 16))}
        f = lambda m: next_token_loss(m, batch)
        if n > 1:
            mesh = Mesh(np.array(jax.devices()), ("expert",))
            def g(m):
                with expert_parallel(mesh): return next_token_loss(m, batch)
            f = g
        (loss, aux), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(model)
        out[balance] = {"loss": float(loss), "bias": np.asarray(aux["moe_bias_next"]).tolist(), "cv": float(aux["moe/load_cv"]),
                        "grad": [np.asarray(x).ravel()[:50].tolist() for x in jax.tree.leaves(grads)]}
    print(json.dumps(out))
''')

def run(n):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json; return json.loads(r.stdout.strip().splitlines()[-1])

def test_one_vs_eight_devices_agree():
    import numpy as np
    a, b = run(1), run(8)
    for bal in a:
        assert abs(a[bal]["loss"] - b[bal]["loss"]) < 1e-5, bal
        assert abs(a[bal]["cv"] - b[bal]["cv"]) < 1e-5, bal
        assert np.allclose(a[bal]["bias"], b[bal]["bias"], atol=1e-5), bal
        for x, y in zip(a[bal]["grad"], b[bal]["grad"]): assert np.allclose(x, y, atol=1e-5), bal
