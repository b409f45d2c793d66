"MoE layer: permutation-exact dispatch, dropless == per-token loop, QB exact balance, aux-free direction, kernels, trainer."

import dataclasses, os
import jax, jax.numpy as jnp, numpy as np, pytest
from marin.models.transformer import LlamaConfig, init, next_token_loss
from marin.models.moe import (
    MoEConfig,
    MoEMLP,
    moe_mlp,
    moe_mlp_reference,
    route,
    sort_by_expert,
    quantile_bias,
    aux_free_bias,
    expert_load,
)
from marin.models.hf import mixtral_config
from marin.kernels.moe_dispatch import combine_reference, dispatch_reference


def cfg_for(**moe):
    return LlamaConfig(
        vocab_size=32,
        seq_len=16,
        d_model=16,
        n_layers=2,
        n_heads=2,
        n_kv_heads=2,
        d_ff=24,
        moe=MoEConfig(**{"n_experts": 8, "top_k": 2, **moe}),
    )


@pytest.mark.parametrize("seed,T,E,k", [(0, 37, 8, 2), (1, 64, 4, 1), (2, 16, 6, 3)])
def test_router_and_dispatch_are_permutation_exact(seed, T, E, k):
    m = MoEConfig(n_experts=E, top_k=k, balance="none")
    key = jax.random.PRNGKey(seed)
    x = jax.random.normal(key, (T, 8))
    r = route(m, jax.random.normal(jax.random.fold_in(key, 1), (8, E)), jnp.zeros(E), x)
    assert all(len(set(row)) == k for row in np.asarray(r.expert_ids).tolist())  # k distinct experts per token
    plan = sort_by_expert(r.expert_ids, E)
    assert sorted(np.asarray(plan.order).tolist()) == list(range(T * k))  # every assignment exactly once
    xs = dispatch_reference(x, plan.order, k)
    se = np.asarray(plan.sorted_experts)
    assert (np.diff(se) >= 0).all() and np.asarray(plan.group_sizes).tolist() == np.bincount(se, minlength=E).tolist()
    t, j = np.divmod(np.asarray(plan.order), k)  # row i is its token, sent to its expert
    assert np.array_equal(np.asarray(xs), np.asarray(x)[t]) and np.array_equal(np.asarray(r.expert_ids)[t, j], se)
    onehot = jnp.zeros((T, k)).at[:, 0].set(1.0)
    assert jnp.array_equal(combine_reference(xs, plan.inverse, onehot), x)  # back to its place, bit-exact
    from marin.kernels.moe_dispatch import make_dispatch_combine

    disp, comb = make_dispatch_combine("prefetch", interpret=True)
    # jitted: one program each (op by op, an interpreted kernel dispatches each of its ops: slow)
    assert jnp.array_equal(jax.jit(disp, static_argnums=2)(x, plan.order, k), xs)
    assert jnp.array_equal(jax.jit(comb)(xs, plan.inverse, onehot), x)


@pytest.mark.parametrize("router,kernel", [("sigmoid", "xla"), ("softmax", "pallas")])
def test_dropless_equals_per_token_loop(router, kernel):
    cfg = cfg_for(router=router, kernel=kernel, n_shared_experts=1)
    with jax.enable_x64(True):
        p = jax.tree.map(lambda a: a.astype(jnp.float64), MoEMLP.init(cfg, key=jax.random.PRNGKey(3)))
        p = dataclasses.replace(p, router_bias=jnp.linspace(-0.05, 0.05, 8))  # a selection bias in play
        h = jax.random.normal(jax.random.PRNGKey(4), (2, 5, 16), jnp.float64)
        y, stats = jax.jit(lambda p, h: moe_mlp(cfg, p, h))(p, h)  # one program (op by op: each op compiles)
        x = h.reshape(-1, 16)
        r = route(cfg.moe, p.router, p.router_bias, x)
        # the loop in float64 NumPy: each token through its shared expert and its 2 routed experts, one at a time
        q = jax.tree.map(np.asarray, p)
        ids, weights, xs, ys = np.asarray(r.expert_ids), np.asarray(r.weights), np.asarray(x), np.asarray(y)
        silu = lambda v: v / (1 + np.exp(-v))
        swiglu = lambda v, g, u, d: (silu(v @ g) * (v @ u)) @ d
        for t in range(xs.shape[0]):
            want = swiglu(xs[t], q.shared_gate, q.shared_up, q.shared_down)
            for j in range(2):
                e = int(ids[t, j])
                want = want + weights[t, j] * swiglu(xs[t], q.expert_gate[e], q.expert_up[e], q.expert_down[e])
            assert np.allclose(ys.reshape(-1, 16)[t], want, rtol=0, atol=1e-10)
        assert np.isclose(float(weights.sum(-1).min()), 1.0) and float(stats["overflow"]) == 0.0


def test_pallas_layer_gradients_match_xla():
    cfg = cfg_for(balance="none")
    p = MoEMLP.init(cfg, key=jax.random.PRNGKey(5))
    h = jax.random.normal(jax.random.PRNGKey(6), (2, 8, 16))
    f = lambda c: lambda p, h: jnp.sum(jnp.sin(moe_mlp(c, p, h)[0]))
    grad = lambda c: jax.jit(jax.grad(f(c), argnums=(0, 1)))  # one program each (eagerly: op by op, slow)
    gp = grad(cfg.replace(moe=cfg.moe.replace(kernel="pallas")))(p, h)
    gx = grad(cfg)(p, h)
    for a, b in zip(jax.tree.leaves(gp), jax.tree.leaves(gx)):
        assert jnp.allclose(a, b, atol=1e-5)


def test_quantile_bias_balances_exactly_and_groups_average():
    T, E, k = 512, 8, 2
    s = jax.nn.softmax(2 * jax.random.normal(jax.random.PRNGKey(7), (T, E)) + jnp.linspace(0, 2, E), -1)
    loads = lambda b: np.bincount(np.asarray(jax.lax.top_k(s + b, k)[1]).ravel(), minlength=E)
    b = quantile_bias(s, jnp.zeros(E), k, iters=100)
    assert np.abs(loads(b) - k * T // E).max() <= 1, loads(b)
    one = quantile_bias(s, jnp.zeros(E), k)
    assert np.std(loads(one)) < 0.6 * np.std(loads(jnp.zeros(E)))  # one update already shrinks the spread
    g2 = quantile_bias(s, jnp.zeros(E), k, groups=2)
    halves = [quantile_bias(s[: T // 2], jnp.zeros(E), k), quantile_bias(s[T // 2 :], jnp.zeros(E), k)]
    assert jnp.allclose(g2, (halves[0] + halves[1]) / 2, atol=1e-6)  # per-device betas, averaged
    with pytest.raises(ValueError, match="balance_groups"):
        quantile_bias(s[:511], jnp.zeros(E), k, groups=2)


def test_aux_free_bias_moves_towards_balance():
    load = jnp.array([0.4, 0.1, 0.25, 0.25])
    b = aux_free_bias(jnp.zeros(4), load, 0.01)
    assert b[0] < 0 and b[1] > 0 and b[2] == 0 and b[3] == 0


def test_capacity_mode_reports_overflow():
    cfg = cfg_for(dispatch="capacity", capacity_factor=0.5, balance="none")
    p = MoEMLP.init(cfg, key=jax.random.PRNGKey(8))
    h = jax.random.normal(jax.random.PRNGKey(9), (4, 8, 16))
    _, st = jax.jit(lambda p, h: moe_mlp(cfg, p, h))(p, h)  # one program (op by op: each op compiles)
    assert 0.4 <= float(st["overflow"]) < 1.0  # at least half the rows must drop


def test_model_loss_metrics_and_bias_update(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    from marin.models.io import load_model
    from marin.train.trainer import TrainConfig, train, SyntheticDataConfig
    from marin.train.optim import OptimizerConfig
    from marin.core.tracking import read_metrics

    model = cfg_for(balance="quantile").replace(vocab_size=64)
    cfg = TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=64, batch_size=4, seq_len=16),
        num_train_steps=3,
        log_every=1,
        progress=False,
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup=0),
        tracker="offline",
    )
    out = str(tmp_path / "run")
    train(cfg, out)
    df = read_metrics(out)
    for k in (
        "moe/load_cv",
        "moe/max_violation",
        "moe/entropy",
        "moe/dead_experts",
        "moe/aux_loss",
        "moe/z_loss",
        "moe/load/l1/e7",
    ):
        assert k in df.columns, k
    m, meta = load_model(out)
    assert meta["model_config"]["moe"]["balance"] == "quantile" and m.cfg.moe.n_experts == 8
    b = np.asarray(m.blocks.moe.router_bias)
    assert (
        b.shape == (2, 8) and np.abs(b).max() > 0 and np.allclose(b.mean(-1), 0, atol=1e-6)
    )  # QB wrote a centred bias
    # switch loss enters the loss; z-loss always
    mm = init(cfg_for(balance="switch", aux_loss_coef=0.5), key=jax.random.PRNGKey(0))
    batch = {"tokens": jnp.zeros((2, 16), jnp.int32), "loss_mask": jnp.ones((2, 16))}
    loss, aux = jax.jit(next_token_loss)(mm, batch)  # one program (op by op, an MoE's loss compiles each op: slow)
    want = aux["ce"] + 0.5 * aux["moe/aux_loss"] + mm.cfg.moe.router_z_loss_coef * aux["moe/z_loss"]
    assert jnp.allclose(loss, want, rtol=1e-6)


def test_mixtral_config_is_a_valid_hf_config():
    transformers = pytest.importorskip("transformers")
    cfg = cfg_for(balance="switch")
    d = mixtral_config(cfg)
    hf = transformers.MixtralConfig(**{k: v for k, v in d.items() if k not in ("model_type", "architectures")})
    assert (hf.num_local_experts, hf.num_experts_per_tok, hf.intermediate_size, hf.hidden_size) == (8, 2, 24, 16)
    assert hf.model_type == d["model_type"] == "mixtral"


def test_blocked_grouped_matmul_in_the_model():
    "The dropless layer with small padded blocks equals the every-expert reference (values and gradients)."
    cfg = cfg_for(balance="quantile", grouped_matmul="blocked", block_rows=4)
    p = MoEMLP.init(cfg, key=jax.random.PRNGKey(3))
    h = jax.random.normal(jax.random.PRNGKey(4), (2, 16, 16))
    y, _ = jax.jit(lambda p, h: moe_mlp(cfg, p, h))(p, h)
    assert jnp.allclose(y, moe_mlp_reference(cfg, p, h), atol=1e-5)
    g = jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(moe_mlp(cfg, p, h)[0]))))(p)
    gr = jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(moe_mlp_reference(cfg, p, h)))))(p)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(gr)):
        assert jnp.allclose(a, b, atol=1e-5)


def test_moe_in_chosen_layers(
    every=2, first_dense=1, n_layers=5, moe_ids=(2, 4)
):  # a dense layer, two [dense, MoE] groups
    "Mixed dense/MoE stacks: right layers, exact parameter count, scan over groups == unrolled loop, bias update, no Mixtral."
    from marin.models.transformer import count_params, post_step_update

    cfg = LlamaConfig(
        vocab_size=32,
        seq_len=16,
        d_model=16,
        n_layers=n_layers,
        n_heads=2,
        n_kv_heads=2,
        d_ff=24,
        moe=MoEConfig(n_experts=4, top_k=2, every=every, first_dense_layers=first_dense),
    )
    assert cfg.moe.moe_layer_ids(n_layers) == moe_ids
    model = init(cfg, key=jax.random.PRNGKey(0))
    assert count_params(model) == cfg.n_params
    assert model.blocks.mlp.w_gate.shape[0] == n_layers - len(moe_ids) and model.blocks.moe.expert_gate.shape[0] == len(
        moe_ids
    )
    dense = cfg.replace(moe=None)
    D, F, E = 16, 24, 4
    assert cfg.n_matmul_params - dense.n_matmul_params == len(moe_ids) * (
        D * E + 3 * D * F * 2 - 3 * D * F
    )  # k=2 experts + router
    toks = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 32)
    batch = {"tokens": toks, "loss_mask": jnp.ones((2, 16))}
    out = {}
    for loop in ("scan", "unroll"):
        m = dataclasses.replace(model, cfg=cfg.replace(layer_loop=loop))
        out[loop] = jax.jit(lambda m: next_token_loss(m, batch))(m)
    (ls, aux), (lu, auxu) = out["scan"], out["unroll"]
    assert abs(float(ls) - float(lu)) < 1e-5 and jnp.allclose(aux["moe_bias_next"], auxu["moe_bias_next"], atol=1e-6)
    assert aux["moe_bias_next"].shape == (len(moe_ids), E)
    assert {k.split("/")[2] for k in aux if k.startswith("moe/load/")} == {f"l{l}" for l in moe_ids}
    new = post_step_update(model, aux)
    assert jnp.array_equal(new.blocks.moe.router_bias, aux["moe_bias_next"])
    with pytest.raises(ValueError, match="every layer"):
        mixtral_config(cfg)
    with pytest.raises(ValueError, match="first_dense_layers"):
        LlamaConfig(
            vocab_size=32,
            seq_len=16,
            d_model=16,
            n_layers=2,
            n_heads=2,
            n_kv_heads=2,
            d_ff=24,
            moe=MoEConfig(every=2, first_dense_layers=1),
        )
