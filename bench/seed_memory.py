"""Peak host memory of starting a training state from given weights (SFT seeding, `--init-from`): the old way built a
random state and swapped the weights in; `init_state(cfg, mesh, opt, params)` builds nothing beside them.
Run: `.venv/bin/python bench/seed_memory.py old` and `... new` (one process each: ru_maxrss is per process)."""

import sys, resource, jax, jax.numpy as jnp, equinox as eqx
from marin.models.transformer import LlamaConfig, init
from marin.train.trainer import TrainConfig, SyntheticDataConfig, init_state, state_shardings
from marin.train.sharding import make_mesh
from marin.train.optim import build_optimizer

cfg = TrainConfig(
    model=LlamaConfig(vocab_size=32000, seq_len=256, d_model=768, n_layers=8, n_heads=12, n_kv_heads=12, d_ff=2048),
    data=SyntheticDataConfig(vocab_size=32000, batch_size=2, seq_len=256),
)
mesh = make_mesh(cfg.mesh)
opt, _ = build_optimizer(cfg.optimizer, 10)
base = eqx.filter(init(cfg.model, key=jax.random.PRNGKey(7)), eqx.is_array)
jax.block_until_ready(base)
nbytes = sum(a.nbytes for a in jax.tree.leaves(base))
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[1] == "old":  # what seed_from_base did: a random state, then the base swapped in
    state = init_state(cfg, mesh, opt)
    params = jax.device_put(base, state_shardings(cfg, mesh, opt).params)
    state = eqx.tree_at(lambda s: (s.params, s.opt_state), state, (params, opt.init(params)))
else:
    state = init_state(cfg, mesh, opt, base)
jax.block_until_ready(state)
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(
    f"{sys.argv[1]}: params {nbytes / 2**20:.0f} MiB; peak RSS before {r0 / 2**10:.0f} MiB, after {r1 / 2**10:.0f} MiB, growth {(r1 - r0) / 2**10:.0f} MiB = {(r1 - r0) * 1024 / nbytes:.2f}x params"
)
