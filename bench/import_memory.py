"""Peak host memory and time of importing a big Hugging Face checkpoint (issue #18, item 7).

Writes a random ~1.1B-parameter Llama (d_model 2048, 16 layers, d_ff 8192, vocabulary 32000, untied) in bfloat16 as
sharded safetensors with an index (`model-0000x-of-0000y.safetensors`), then imports it in fresh processes, side by
side in one run:

- `lazy`: `marin.models.hf.import_hf` (tensors read one at a time from memory-mapped shards: `HFTensors`);
- `eager`: every tensor read into one dict first (`read_safetensors` per shard), then assembled: what import did
  before `HFTensors`.

Each is run with the parameters kept in bfloat16 (`dtype="bfloat16"`) and widened to float32. Peak memory is the
process's maximum resident set (`ru_maxrss`) minus its resident set just before the import (Python, JAX and the lab
imported, the CPU backend started), divided by the checkpoint's bytes and by the built model's bytes.

    .venv/bin/python bench/import_memory.py [--folder /tmp/marin-llama-1b] [--keep]
"""

import argparse, json, os, resource, shutil, subprocess, sys, time
import numpy as np

SHAPE = dict(vocab=32000, d=2048, layers=16, heads=32, kv_heads=8, ff=8192)


def write_checkpoint(folder: str, shards: int = 4) -> int:
    "A random bfloat16 Llama in `shards` files plus the index; returns the bytes of the weights."
    import ml_dtypes
    from safetensors.numpy import save_file

    s, rng = SHAPE, np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    hd = s["d"] // s["heads"]

    def rand(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    def layer(i):
        p = f"model.layers.{i}."
        return {
            p + "input_layernorm.weight": np.ones(s["d"], ml_dtypes.bfloat16),
            p + "post_attention_layernorm.weight": np.ones(s["d"], ml_dtypes.bfloat16),
            p + "self_attn.q_proj.weight": rand(s["heads"] * hd, s["d"]),
            p + "self_attn.k_proj.weight": rand(s["kv_heads"] * hd, s["d"]),
            p + "self_attn.v_proj.weight": rand(s["kv_heads"] * hd, s["d"]),
            p + "self_attn.o_proj.weight": rand(s["d"], s["heads"] * hd),
            p + "mlp.gate_proj.weight": rand(s["ff"], s["d"]),
            p + "mlp.up_proj.weight": rand(s["ff"], s["d"]),
            p + "mlp.down_proj.weight": rand(s["d"], s["ff"]),
        }

    groups = np.array_split(np.arange(s["layers"]), shards)
    weight_map, total = {}, 0
    for k, ids in enumerate(groups):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {}
        for i in ids:
            tensors.update(layer(int(i)))
        if k == 0:
            tensors["model.embed_tokens.weight"] = rand(s["vocab"], s["d"])
        if k == shards - 1:
            tensors["lm_head.weight"] = rand(s["vocab"], s["d"])
            tensors["model.norm.weight"] = np.ones(s["d"], ml_dtypes.bfloat16)
        save_file(tensors, os.path.join(folder, name), metadata={"format": "pt"})
        weight_map.update({t: name for t in tensors})
        total += sum(a.nbytes for a in tensors.values())
        del tensors
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": s["vocab"],
        "hidden_size": s["d"],
        "intermediate_size": s["ff"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return total


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(folder: str, reader: str, dtype: str) -> dict:
    "Runs in a fresh process: imports `folder` and reports the memory and time it took."
    import jax
    import jax.numpy as jnp
    from marin.models import hf, transformer  # noqa: F401  (the model's modules, imported before the baseline)

    jax.block_until_ready(jnp.zeros(1))  # the CPU backend started: part of the baseline, not of the import
    base = rss_bytes()
    t0 = time.perf_counter()
    d = hf.read_hf_config(folder)
    if reader == "lazy":
        tensors = hf.read_hf_tensors(folder, dtype)
    else:

        class Eager(dict):  # every tensor in memory first, as import did before HFTensors
            pass

        tensors = Eager()
        tensors.dtype = dtype
        for f in hf.hf_weight_files(folder):
            tensors.update(hf.read_safetensors(os.path.join(folder, f)))
    model = hf.model_from_hf(d, tensors)
    jax.block_until_ready(jax.tree.leaves(model))
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    leaves = [x for x in jax.tree.leaves(model) if hasattr(x, "nbytes")]
    return {
        "reader": reader,
        "dtype": dtype,
        "param_dtypes": sorted({str(x.dtype) for x in leaves}),
        "params": int(sum(x.size for x in leaves)),
        "model_bytes": int(sum(x.nbytes for x in leaves)),
        "baseline_rss": base,
        "peak_rss": peak,
        "seconds": seconds,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", default="/tmp/marin-llama-1b")
    ap.add_argument("--keep", action="store_true", help="leave the checkpoint on disk")
    ap.add_argument("--child", nargs=2, metavar=("READER", "DTYPE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.folder, *a.child)))
        return
    if not os.path.exists(os.path.join(a.folder, "model.safetensors.index.json")):
        t0 = time.perf_counter()
        n = write_checkpoint(a.folder)
        print(f"wrote {n / 2**30:.2f} GiB of bfloat16 weights to {a.folder} in {time.perf_counter() - t0:.0f} s")
    ckpt = sum(os.path.getsize(os.path.join(a.folder, f)) for f in os.listdir(a.folder) if f.endswith(".safetensors"))
    print(f"load average {os.getloadavg()[0]:.2f}; checkpoint {ckpt / 2**30:.2f} GiB (bfloat16)")
    print("| reader | parameters kept in | params | peak − baseline | ÷ checkpoint bytes | ÷ model bytes | seconds |")
    print("|---|---|---|---|---|---|---|")
    for reader, dtype in (("lazy", "bfloat16"), ("eager", "bfloat16"), ("lazy", "float32"), ("eager", "float32")):
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        out = subprocess.run(
            [sys.executable, __file__, "--folder", a.folder, "--child", reader, dtype],
            capture_output=True,
            text=True,
            env=env,
        )
        if out.returncode:
            print(f"| {reader} | {dtype} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        grew = r["peak_rss"] - r["baseline_rss"]
        print(
            f"| {reader} | {','.join(r['param_dtypes'])} | {r['params'] / 1e9:.2f} B | {grew / 2**30:.2f} GiB |"
            f" {grew / ckpt:.2f}× | {grew / r['model_bytes']:.2f}× | {r['seconds']:.1f} |"
        )
    if not a.keep:
        shutil.rmtree(a.folder)


if __name__ == "__main__":
    main()
