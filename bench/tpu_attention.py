"""The 8b preset at 8192 context (or another, `--preset`) compiled for a TPU slice with the reference attention and
with the splash kernel.

    JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1 nice -n 10 .venv/bin/python bench/tpu_attention.py --attention reference
    JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1 nice -n 10 .venv/bin/python bench/tpu_attention.py --attention splash
    JAX_PLATFORMS=cpu .venv/bin/python bench/tpu_attention.py --table   # the side-by-side table from the cache

Needs libtpu (the `tpu` extra); no TPU. Each run is `marin.train.slice_compile.compile_for_slice` on the `8b` preset
(`marin.train.cli.PRESETS`) with `model.attention` set, so the step is the trainer's own (mesh, shardings, remat,
grad_accum 4, bf16), traced with the TPU code paths and compiled by the TPU compiler for the slice's abstract devices.
The preset's own choice is `auto` (splash where traced for TPU); `reference` materialises the `[S, S]` scores. The row
is appended to a JSON-lines cache (`--cache`) with the git commit it was compiled at; `--table` prints the latest row
of each (slice, attention). One 8b compile takes 10-15 CPU minutes on a loaded 2-core machine: run one at a time."""

import argparse, json, os, subprocess, sys, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

SLICE = "v5p:4x4x8"  # v5p-256: 128 chips, 32 hosts; the 8b preset's slice in BENCHMARKS.md's preset table


def compile_run(attention: str, target: str, preset: str = "8b") -> dict:
    from marin.train.cli import PRESETS
    from marin.train.slice_compile import compile_for_slice

    cfg = PRESETS[preset]()
    cfg = cfg.replace(model=cfg.model.replace(attention=attention))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    r = compile_for_slice(cfg, target)  # the commit above is the code it traced (the working tree at the start)
    return {
        "config": preset,
        "slice": target,
        "attention": attention,
        "seq_len": cfg.data.seq_len,
        "devices": r.target.devices,
        "hosts": r.hosts,
        "mesh": r.mesh,
        **{k: getattr(r, k) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "flops")},
        **{k: getattr(r, k) for k in ("counted_flops", "lower_s", "compile_s", "fits", "error")},
        "total_bytes": r.total_bytes,
        "hbm_bytes": r.target.hbm_bytes,
        "commit": commit,
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }


def table(rows: list[dict]) -> str:
    gib = lambda x: f"{x / 2**30:.2f}"
    out = [
        "| config | slice | attention | temporaries GiB per chip | total GiB per chip (of HBM) | FLOPs per chip "
        "(compiler) | compile s | commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        total = f"{gib(r['total_bytes'])} (of {gib(r['hbm_bytes'])})" if r["fits"] else "does not fit (compiler: OOM)"
        out.append(
            f"| {r['config']} (S={r['seq_len']}) | {r['slice']} ({r['devices']} chips, {r['hosts']} hosts) "
            f"| {r['attention']} | {gib(r['temp_bytes'])} | {total} | {r['flops']:.4g} | {r['compile_s']:.0f} "
            f"| {r['commit']} |"
        )
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attention", choices=["reference", "splash", "auto"], help="compile the step with this one")
    ap.add_argument("--slice", default=SLICE)
    ap.add_argument("--preset", default="8b", help="a training preset (marin.train.cli.PRESETS)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/marin/tpu_attention.jsonl"))
    ap.add_argument("--table", action="store_true", help="print the table from the cache, compile nothing")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.cache), exist_ok=True)
    if a.attention and not a.table:
        print(f"compiling {a.preset} for {a.slice} with attention={a.attention} ...", file=sys.stderr, flush=True)
        row = compile_run(a.attention, a.slice, a.preset)
        with open(a.cache, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), file=sys.stderr, flush=True)
    rows = [json.loads(l) for l in open(a.cache) if l.strip()] if os.path.exists(a.cache) else []
    latest = {(r["config"], r["slice"], r["attention"]): r for r in rows}  # the last compile of each
    print(
        table(
            sorted(
                latest.values(),
                key=lambda r: (r["config"] != "8b", r["config"], r["devices"], r["attention"] != "reference"),
            )
        )
    )


if __name__ == "__main__":
    main()
