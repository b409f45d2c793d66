"Step functions for the cluster tests (importable by Ray workers: the test cluster's nodes have this folder on PYTHONPATH)."

import dataclasses, json, os, time
import numpy as np
from marin.core import storage
from marin.core.config import versioned


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    index: int = versioned(0)
    seconds: float = 0.0  # how long the step keeps its slot busy (not part of the output's identity)


def sweep_point(cfg: SweepConfig, out: str):
    "A tiny deterministic 'experiment': statistics of a seeded sample, after holding its slot for `seconds`."
    time.sleep(cfg.seconds)
    x = np.random.default_rng(cfg.index).normal(size=1000)
    storage.write_json(
        storage.join(out, "stats.json"), {"index": cfg.index, "mean": float(x.mean()), "std": float(x.std())}
    )
    return {"eval/mean": float(x.mean())}


@dataclasses.dataclass(frozen=True)
class GatherConfig:
    points: tuple = ()


def gather(cfg: GatherConfig, out: str):
    rows = [storage.read_json(storage.join(p, "stats.json")) for p in cfg.points]
    storage.write_json(storage.join(out, "table.json"), sorted(rows, key=lambda r: r["index"]))


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    names: tuple = versioned(())


def env_probe(cfg: ProbeConfig, out: str):
    "Which of `names` the worker's environment has (the values are never written)."
    seen = {n: n in os.environ for n in cfg.names}
    storage.write_json(storage.join(out, "seen.json"), seen)
    return {"system/secrets_seen": sum(seen.values())}


@dataclasses.dataclass(frozen=True)
class FlakyConfig:
    index: int = versioned(0)
    bad_node: str = ""  # the `marin-node` label of the node that is broken


def crash_on_bad_node(cfg: FlakyConfig, out: str):
    "Dies like a broken machine (no exception: the process just ends) when it runs on the node labelled `bad_node`."
    import ray

    me = ray.get_runtime_context().get_node_id()
    labels = next(n.get("Labels", {}) for n in ray.nodes() if n["NodeID"] == me)
    if labels.get("marin-node") == cfg.bad_node:
        os._exit(1)
    storage.write_json(storage.join(out, "ok.json"), {"index": cfg.index})


@dataclasses.dataclass(frozen=True)
class AllReduceConfig:
    n: int = versioned(8)


def allreduce(cfg: AllReduceConfig, out: str):
    "A multi-host JAX program: every process contributes its id and its shard of arange(n)."
    import jax
    from jax.experimental import multihost_utils as mu
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    ids = mu.process_allgather(np.array([jax.process_index()])).reshape(-1).tolist()
    mesh = Mesh(np.array(jax.devices()), ("d",))
    full = np.arange(cfg.n, dtype=np.float32)
    x = jax.make_array_from_callback((cfg.n,), NamedSharding(mesh, P("d")), lambda idx: full[idx])
    total = float(jax.jit(lambda v: v.sum(), out_shardings=NamedSharding(mesh, P()))(x))
    if jax.process_index() == 0:
        storage.write_json(
            storage.join(out, "result.json"),
            {"process_count": jax.process_count(), "device_count": jax.device_count(), "ids": ids, "sum": total},
        )
    return {"system/process_count": jax.process_count()}
