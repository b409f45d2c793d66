"MoE communication on 8 CPU devices as 2 nodes x 4: all-to-all byte accounting vs the HLO, expert placement, node-limited routing."

import textwrap
import numpy as np
import pytest
from conftest import run_scripts

PRELUDE = textwrap.dedent("""
    import json, re
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from marin.models.transformer import LlamaConfig
    from marin.models.moe import MoEConfig, MoEMLP, route
    from marin.models.moe_parallel import moe_mlp_expert_parallel, a2a_rows, split_bytes
    assert len(jax.devices()) == 8
    mesh = Mesh(np.array(jax.devices()), ("expert",))
    NODES = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # devices_per_node=4

    def tiny(**moe):
        return LlamaConfig(vocab_size=32, seq_len=64, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=24,
                           moe=MoEConfig(n_experts=8, top_k=2, **moe))

    def hlo_a2a_bytes(fn, *args):
        "Bytes of every all-to-all's result buffers in the compiled per-device HLO."
        size = {"f32": 4, "s32": 4, "bf16": 2, "f16": 2}
        total = 0
        for line in fn.lower(*args).compile().as_text().splitlines():
            m = re.search(r"= (.*) all-to-all\\(", line)
            if m:
                for dt, dims in re.findall(r"(\\w+)\\[([\\d,]*)\\]", m.group(1)):
                    total += size[dt] * int(np.prod([int(d) for d in dims.split(",") if d]))
        return total

    def hlo_a2a_links(fn, *args, nodes=NODES):
        # bytes every device's all-to-alls send, by link class, from the compiled HLO: a tuple all-to-all sends its
        # j-th buffer to the j-th member of the device's replica group (one array: an equal share to each member)
        size = {"f32": 4, "s32": 4, "bf16": 2, "f16": 2}
        out = {"local": 0, "intra": 0, "cross": 0}
        for line in fn.lower(*args).compile().as_text().splitlines():
            m = re.search(r"= (.*) all-to-all\\(.*replica_groups=\\{(\\{[\\d,{}]*\\})\\}", line)
            if not m:
                assert "all-to-all(" not in line, line  # a form this parser does not know
                continue
            bufs = [size[dt] * int(np.prod([int(d) for d in dims.split(",") if d]))
                    for dt, dims in re.findall(r"(\\w+)\\[([\\d,]*)\\]", m.group(1))]
            for g in re.findall(r"\\{([\\d,]+)\\}", m.group(2)):
                group = [int(d) for d in g.split(",")]
                per = bufs if len(bufs) == len(group) else [sum(bufs) / len(group)] * len(group)
                for src in group:
                    for dst, b in zip(group, per):
                        out["local" if src == dst else "intra" if nodes[src] == nodes[dst] else "cross"] += b
        return out
""")


ACCOUNTING = """
    out = {}
    h = jax.random.normal(jax.random.PRNGKey(1), (8, 64, 16))  # one row of 64 tokens per device
    for name, moe in {"saturated": dict(balance="none", dispatch="capacity", capacity_factor=0.05),
                      "dropless": dict(balance="quantile")}.items():
        cfg = tiny(**moe)
        p = MoEMLP.init(cfg, key=jax.random.PRNGKey(0))
        f = jax.jit(lambda p, h: moe_mlp_expert_parallel(cfg, p, h, mesh, devices_per_node=4))
        _, s = f(p, h)
        # the same routing decisions on the host, device by device
        ids = jnp.stack([route(cfg.moe, p.router, p.router_bias, h[i]).expert_ids for i in range(8)])
        rows = np.asarray(a2a_rows(ids, 1))
        row = 16 * 4 + 4 + 16 * 4
        host = {k: sum(float(split_bytes(jnp.asarray(rows[i]), NODES[i], jnp.asarray(NODES), i, row)[k]) for i in range(8))
                for k in ("local", "intra", "cross")}
        out[name] = {"stats": {k: float(v) for k, v in s.items() if k.startswith("a2a_")}, "host": host,
                     "hlo_per_device": hlo_a2a_bytes(f, p, h), "hlo_links": hlo_a2a_links(f, p, h),
                     "rows": rows.tolist()}
    print("RESULT", json.dumps(out))
"""


def test_a2a_bytes_match_routing_and_hlo(child):
    "The in-step byte counts equal a host recount from the routing decisions; full buffers equal the HLO's all-to-alls."
    out = child["accounting"]
    for name, o in out.items():
        s, host = o["stats"], o["host"]
        hlo_total = 8 * o["hlo_per_device"]  # the HLO is one device's program
        assert o["hlo_per_device"] > 0, name
        if name == "dropless":  # every routed row is counted, by the class of its link
            for k in ("local", "intra", "cross"):
                assert s[f"a2a_{k}"] == host[k], (name, k, s, host)
            assert sum(s[f"a2a_{k}"] for k in ("local", "intra", "cross")) == 8 * 64 * 2 * (16 * 4 + 4 + 16 * 4)
            assert 0 < s["a2a_cross_dedup"] <= s["a2a_cross"], s  # a copy per remote node <= a copy per expert
            assert hlo_total > sum(s[f"a2a_{k}"] for k in ("local", "intra", "cross"))  # padded worst-case buffers
        else:  # capacity 1 row per peer, every peer gets >= 1 row: the buffers are full, routed = HLO bytes
            assert min(min(r) for r in o["rows"]) >= 1, o["rows"]
            assert sum(s[f"a2a_{k}"] for k in ("local", "intra", "cross")) == hlo_total, (s, hlo_total)
            assert s["a2a_local"] == hlo_total / 8  # one of the 8 peers is the device itself
            assert s["a2a_intra"] == 3 * hlo_total / 8 and s["a2a_cross"] == 4 * hlo_total / 8
            assert all(s[f"a2a_{k}"] == o["hlo_links"][k] for k in ("local", "intra", "cross")), (s, o["hlo_links"])


TRAINER = """
    from marin.models.moe import MoEConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training, train_metrics
    model = LlamaConfig(vocab_size=32, seq_len=16, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24,
                        moe=MoEConfig(n_experts=8, top_k=2, d_expert=16))
    cfg = TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=32, batch_size=8, seq_len=16),
                      mesh=MeshConfig(data=1, expert=8, devices_per_node=4),
                      optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0), num_train_steps=2)
    t = setup_training(cfg)
    state, m = t.step(t.init_state(), t.batch(0))
    rec = train_metrics(jax.device_get(m), 1, 1.0, 1.0, 1.0, 128)
    print("RESULT", json.dumps({k: float(v) for k, v in rec.items() if k.startswith("moe/a2a_bytes")}))
"""


def test_a2a_bytes_logged_per_layer_by_the_trainer(child):
    "MeshConfig(expert=8, devices_per_node=4): the tracker's record has moe/a2a_bytes/{intra,cross} per layer."
    rec = child["trainer"]
    row = 16 * 4 + 4 + 16 * 4
    for l in (0, 1):
        intra, cross = rec[f"moe/a2a_bytes/intra/l{l}"], rec[f"moe/a2a_bytes/cross/l{l}"]
        assert intra > 0 and cross > 0 and (intra + cross) <= 128 * 2 * row and (intra + cross) % row == 0, rec
    assert rec["moe/a2a_bytes/cross"] == rec["moe/a2a_bytes/cross/l0"] + rec["moe/a2a_bytes/cross/l1"]


PLACEMENT = """
    import equinox as eqx
    from marin.models.transformer import forward
    from marin.models.moe_placement import collect_routing_counts, locality_placement, permute_experts
    from marin.train.optim import OptimizerConfig
    from marin.train.sharding import MeshConfig, activation_sharding_for
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, setup_training
    model = LlamaConfig(vocab_size=32, seq_len=16, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24,
                        moe=MoEConfig(n_experts=8, top_k=2, d_expert=16, n_shared_experts=1))
    cfg = TrainConfig(model=model, data=SyntheticDataConfig(vocab_size=32, batch_size=8, seq_len=16),
                      mesh=MeshConfig(data=1, expert=8, devices_per_node=4),
                      optimizer=OptimizerConfig(learning_rate=1e-2, warmup=0), num_train_steps=6)
    t = setup_training(cfg)
    state = t.init_state()
    for i in range(3):
        state, _ = t.step(state, t.batch(i))
    # the checkpoint boundary: statistics from the batches just trained on, a placement, the permuted state
    from marin.models.io import abstract_model
    static = abstract_model(model)[1]
    counts = collect_routing_counts(eqx.combine(jax.device_get(state.params), static), [t.loader.batch(i) for i in range(3)], 8, 4)
    slot_nodes = np.arange(8) // 4
    perm = np.stack([locality_placement(counts[l], slot_nodes) for l in range(2)])
    perm[0] = np.array([4, 1, 2, 3, 0, 5, 6, 7]) if (perm[0] == np.arange(8)).all() else perm[0]  # a real move in layer 0
    moved = jax.jit(lambda s: permute_experts(s, perm), out_shardings=jax.tree.map(lambda x: x.sharding, state))(state)
    ep = activation_sharding_for(t.mesh, cfg.mesh.rules, 4)
    logits = jax.jit(lambda p, tok: forward(eqx.combine(p, static), tok, sharding=ep))
    toks = jnp.asarray(t.loader.batch(10)["tokens"])
    a, b = np.asarray(logits(state.params, toks)), np.asarray(logits(moved.params, toks))
    mu = lambda s: [x for x in jax.tree.leaves(s.opt_state) if x.shape == state.params.blocks.moe.expert_gate.shape]
    mu_ok = all(np.array_equal(np.asarray(y)[1], np.asarray(x)[1][perm[1]]) for x, y in zip(mu(state), mu(moved)))
    la, lb = [], []
    for i in range(3, 6):
        state, ma = t.step(state, t.batch(i))
        moved, mb = t.step(moved, t.batch(i))
        la.append(float(ma["loss"])); lb.append(float(mb["loss"]))
    print("RESULT", json.dumps({"identical": bool((a == b).all()), "max_diff": float(np.abs(a - b).max()), "perm": perm.tolist(),
                                "mu_permuted": mu_ok, "n_mu": len(mu(state)), "loss": la, "loss_moved": lb,
                                "spec": str(moved.params.blocks.moe.expert_gate.sharding.spec)}))
"""


def test_placement_keeps_logits_bit_identical_and_training_continues(child):
    "A learned placement applied to a trained state (weights, router, bias, Adam moments): same logits, same training."
    o = child["placement"]
    assert o["identical"], o["max_diff"]
    assert o["perm"][0] != list(range(8))  # something moved
    assert o["mu_permuted"] and o["n_mu"] >= 2, o  # both Adam moments of the expert weights follow their experts
    assert "expert" in o["spec"]  # still sharded over the expert axis
    assert np.allclose(o["loss"], o["loss_moved"], rtol=1e-5, atol=1e-6), (o["loss"], o["loss_moved"])
    assert all(np.isfinite(o["loss_moved"]))


NODE_LIMITED = """
    from marin.models.moe_parallel import _check_node_groups, mesh_nodes
    h = jax.random.normal(jax.random.PRNGKey(1), (8, 64, 16))
    out = {}
    for M in (0, 1, 2):
        for balance in ("quantile", "aux_free", "switch"):
            cfg = tiny(balance=balance, node_groups=2, node_limit=M)
            p = MoEMLP.init(cfg, key=jax.random.PRNGKey(0))
            p = p.__class__(**{**vars(p), "router_bias": 0.05 * jax.random.normal(jax.random.PRNGKey(4), (8,))})
            _, s = jax.jit(lambda p, h: moe_mlp_expert_parallel(cfg, p, h, mesh, devices_per_node=4))(p, h)
            node = np.asarray(s["expert_ids"]) // 4  # experts 0-3 on node 0, 4-7 on node 1
            out[f"{M}/{balance}"] = {"spans": int((node.min(-1) != node.max(-1)).sum()), "dedup": float(s["a2a_cross_dedup"]),
                                     "cross": float(s["a2a_cross"]), "tokens": int(node.shape[0])}
    try:
        moe_mlp_expert_parallel(tiny(node_groups=4, node_limit=2), MoEMLP.init(tiny(node_groups=4, node_limit=2), key=jax.random.PRNGKey(0)), h, mesh, devices_per_node=4)
        out["mismatch"] = "accepted"
    except ValueError as e:
        out["mismatch"] = str(e)
    print("RESULT", json.dumps(out))
"""


def test_node_limited_routing_respects_the_node_limit(child):
    "node_limit=1 on 2 nodes x 4: no token's experts span both nodes (any balancer), so a two-stage dispatch sends <= 1 copy."
    o = child["node_limited"]
    row = 16 * 4 + 4 + 16 * 4
    for bal in ("quantile", "aux_free", "switch"):
        assert o[f"1/{bal}"]["spans"] == 0, (bal, o)
        assert o[f"0/{bal}"]["spans"] > 0, (bal, o)  # without the limit tokens do span both
        assert o[f"2/{bal}"] == o[f"0/{bal}"], bal  # M = number of nodes: the unlimited routing
        assert o[f"1/{bal}"]["dedup"] <= o[f"1/{bal}"]["tokens"] * row  # at most one remote node per token
        assert o[f"1/{bal}"]["dedup"] < o[f"0/{bal}"]["dedup"], (bal, o)
    assert "node_groups=4" in o["mismatch"], o["mismatch"]


TWO_STAGE = """
    out = {}
    h = jax.random.normal(jax.random.PRNGKey(1), (8, 64, 16))
    w_out = jnp.sin(jnp.arange(16.0))
    for dpn in (4, 2):  # 2 nodes x 4, 4 nodes x 2
        res = {}
        for ed in ("flat", "two_stage"):
            cfg = tiny(n_shared_experts=1, balance="quantile", ep_dispatch=ed)
            p = MoEMLP.init(cfg, key=jax.random.PRNGKey(0))
            def loss(p, h):
                y, s = moe_mlp_expert_parallel(cfg, p, h, mesh, devices_per_node=dpn)
                return (y * w_out).sum() + s["aux_loss"], (y, s)
            (l, (y, s)), g = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(p, h)
            res[ed] = (np.asarray(y), {k: np.asarray(v) for k, v in s.items()}, [np.asarray(x) for x in jax.tree.leaves(g)])
        (y1, s1, g1), (y2, s2, g2) = res["flat"], res["two_stage"]
        out[dpn] = {"y_diff": float(np.abs(y1 - y2).max()), "y_scale": float(np.abs(y1).max()),
                    "g_diff": max(float(np.abs(a - b).max() / (np.abs(a).max() + 1e-12)) for a, b in zip(g1, g2)),
                    "stats_equal": all(np.allclose(s1[k], s2[k], atol=1e-6) for k in ("load", "aux_loss", "bias_next", "expert_ids")),
                    "flat": {k: float(v) for k, v in s1.items() if k.startswith("a2a_")},
                    "two_stage": {k: float(v) for k, v in s2.items() if k.startswith("a2a_")}}
    # the HLO's collectives: top_k=5 of 4 experts per node sends every token to both nodes, so stage 1's buffers are full
    for name, moe in {"full": dict(top_k=5, balance="none"), "top2": dict(balance="quantile")}.items():
        cfg = LlamaConfig(vocab_size=32, seq_len=64, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=24,
                          moe=MoEConfig(n_experts=8, ep_dispatch="two_stage", **moe))
        p = MoEMLP.init(cfg, key=jax.random.PRNGKey(0))
        f = jax.jit(lambda p, h: moe_mlp_expert_parallel(cfg, p, h, mesh, devices_per_node=4))
        _, s = f(p, h)
        out[name] = {"stats": {k: float(v) for k, v in s.items() if k.startswith("a2a_")}, "hlo": hlo_a2a_links(f, p, h)}
    print("RESULT", json.dumps(out))
"""


def test_two_stage_dispatch_equals_flat_and_its_cross_bytes_are_the_hlo_and_the_dedup_count(child):
    "ep_dispatch='two_stage': the flat layer's outputs and gradients; its cross-node bytes = cross_dedup = the HLO's."
    o = child["two_stage"]
    row = 2 * 16 * 4 + 2 * (4 + 4)  # a copy out (16 f32 + 2 ids + 2 weights) and its sum back
    for dpn in ("4", "2"):
        d = o[dpn]
        assert d["y_diff"] <= 1e-5 * d["y_scale"] and d["g_diff"] < 1e-4 and d["stats_equal"], (dpn, d)
        f, t = d["flat"], d["two_stage"]
        assert t["a2a_cross"] == t["a2a_cross_dedup"] == f["a2a_cross_dedup"] > 0, (
            dpn,
            d,
        )  # the count is what it sends
        assert t["a2a_cross"] % row == 0 and t["a2a_intra"] % row == 0, (dpn, t)
    # 2 nodes x 4, top-2 of 8: a token's two experts share a node about half the time, and then it crosses once
    assert o["4"]["two_stage"]["a2a_cross"] < 0.9 * o["4"]["flat"]["a2a_cross"], o["4"]
    full = o["full"]
    assert full["hlo"]["cross"] == full["stats"]["a2a_cross"] == full["stats"]["a2a_cross_dedup"] > 0, full
    assert full["stats"]["a2a_cross"] == 8 * 64 * (2 * 16 * 4 + 5 * (4 + 4))  # one copy per token to the other node
    top2 = o["top2"]  # padded worst-case buffers: the HLO moves at least the copies counted
    assert top2["hlo"]["cross"] == full["hlo"]["cross"] * row / (2 * 16 * 4 + 5 * 8) > top2["stats"]["a2a_cross"], top2


@pytest.fixture(scope="module")
def child():
    "All of this file's scripts in one 8-device child process (tests/conftest.py: run_scripts)."
    scripts = {"accounting": ACCOUNTING, "trainer": TRAINER, "placement": PLACEMENT, "node_limited": NODE_LIMITED}
    return run_scripts({**scripts, "two_stage": TWO_STAGE}, prelude=PRELUDE)
