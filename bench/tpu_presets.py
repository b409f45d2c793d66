"""Every training preset compiled by the TPU compiler for real TPU slices (no TPU needed), against the estimates.

    JAX_PLATFORMS=cpu .venv/bin/python bench/tpu_presets.py            # every run below, cached
    JAX_PLATFORMS=cpu .venv/bin/python bench/tpu_presets.py --only 1b  # the runs whose name has "1b"
    JAX_PLATFORMS=cpu .venv/bin/python bench/tpu_presets.py --table    # the table from the cache only

Needs libtpu (the `tpu` extra). Each (preset, slice) is compiled once by `marin.train.slice_compile.compile_for_slice`
and cached in a JSON-lines file keyed by the config's hash and the slice (`--cache`); the table prints per device:
the estimate (`estimate_per_chip`, which the dry run's `marin.train.cli.estimate_memory` now is too), the compiler's
bytes (arguments + temporaries + outputs not aliased), each estimate's ratio to the compiler, the compiler's FLOPs
against the lab's counter (counted the same way; "N loops": the partitioner ran N matmuls as collective-matmul
loops, whose bodies the cost analysis counts once, so the ratio is not comparable) and the compile time. Big
compiles take CPU minutes each. Rows compiled from other code than the checkout's are named on stderr."""

import argparse, dataclasses, json, os, sys, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
from marin.core.config import config_hash
from marin.models.moe import MoEConfig
from marin.train.cli import PRESETS
from marin.train.slice_cache import program_code
from marin.train.slice_compile import compile_for_slice, parse_target


def moe_150m():
    "An MoE preset: the 150m preset's shape with 8 experts of width 1024, top-2, in every layer (XLA dispatch)."
    cfg = PRESETS["150m"]()
    return cfg.replace(model=cfg.model.replace(moe=MoEConfig(n_experts=8, top_k=2, d_expert=1024)))


CONFIGS = {**{k: v for k, v in PRESETS.items()}, "moe-150m": moe_150m}
RUNS = [  # (config, slice): at least two slices each, the cheap ones first
    ("nano", "v5e-4"),
    ("nano", "v5e-8"),
    ("150m", "v5e-4"),
    ("150m", "v5e-16"),
    ("1b", "v5e-64"),
    ("8b", "v5p:4x4x8"),
    ("moe-150m", "v5e-4"),
    ("1b", "v5e-16"),
    ("moe-150m", "v5e-16"),
    ("8b", "v5p-128"),
]


def compile_run(name: str, target: str) -> dict:
    cfg = CONFIGS[name]()
    r = compile_for_slice(cfg, target)
    return {
        "config": name,
        "slice": target,
        "hash": config_hash(cfg),
        "devices": r.target.devices,
        "hosts": r.hosts,
        "mesh": r.mesh,
        **{k: getattr(r, k) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "flops")},
        **{k: getattr(r, k) for k in ("counted_flops", "lower_s", "compile_s", "fits", "error", "windowed_loops")},
        "code": program_code(),  # the lab's program code it was compiled from (`slice_cache.program_code`)
        "total_bytes": r.total_bytes,
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }


def load_cache(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {(r["config"], r["slice"], r["hash"]): r for r in rows}


def table(rows: list[dict]) -> str:
    from marin.train.slice_compile import counted_flops, estimate_per_chip, traced_for

    gib = lambda x: f"{x / 2**30:.2f}"
    out = [
        "| config | slice | devices (hosts) | mesh | estimate GiB | compiler GiB (temp) "
        "| estimate / compiler | FLOPs compiler / counter | compile s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cfg, t = CONFIGS[r["config"]](), parse_target(r["slice"])
        new = estimate_per_chip(cfg, t).total
        comp = r["total_bytes"] if r["fits"] else r["temp_bytes"]
        mesh = " ".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1)
        ctext = f"{gib(comp)} ({gib(r['temp_bytes'])})" if r["fits"] else f">= {gib(comp)} (OOM: temporaries alone)"
        with traced_for("tpu"):  # the counter as the TPU program's loops count (rows cached before it was so)
            counted = counted_flops(cfg, r["devices"])
        flops = f"{r['flops'] / counted:.3f}" if r["fits"] else "-"
        if r.get("windowed_loops"):  # collective-matmul loops: the cost analysis counts each body once
            flops += f" ({r['windowed_loops']} loops)"
        out.append(
            f"| {r['config']} | {t.name} ({t.topology}) | {r['devices']} ({r['hosts']}) | {mesh} "
            f"| {gib(new)} | {ctext} | {new / comp:.2f} | {flops} | {r['compile_s']:.0f} |"
        )
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="run only the (config, slice) pairs whose 'config@slice' has this")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/marin/tpu_presets.jsonl"))
    ap.add_argument("--table", action="store_true", help="print the table from the cache, compile nothing")
    ap.add_argument("--force", action="store_true", help="compile the chosen runs again (the lab's code changed)")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.cache), exist_ok=True)
    cache = load_cache(a.cache)
    rows = []
    for name, target in RUNS:
        if a.only and a.only not in f"{name}@{target}":
            continue
        key = (name, target, config_hash(CONFIGS[name]()))
        if (key not in cache or a.force) and not a.table:
            print(f"compiling {name} for {target} ...", file=sys.stderr, flush=True)
            try:
                cache[key] = compile_run(name, target)
            except Exception as e:  # one config that does not compile does not stop the others
                print(f"FAILED {name} for {target}: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
                continue
            with open(a.cache, "a") as f:
                f.write(json.dumps(cache[key]) + "\n")
            print(json.dumps(cache[key]), file=sys.stderr, flush=True)
        if key in cache:
            rows.append(cache[key])
            if cache[key].get("code") != program_code():
                print(
                    f"note: {name}@{target} was compiled from other code than this checkout's (--force)",
                    file=sys.stderr,
                )
    print(table(rows))


if __name__ == "__main__":
    main()
