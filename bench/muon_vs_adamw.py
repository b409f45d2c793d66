"""Muon against AdamW, side by side (issue #52 item 4): tokens to reach a fixed validation loss.

Same model (the `nano` preset: 4 layers, width 128, context 64, batch 12 x 2 accumulated), same data, same schedule
shape (cosine over the same horizon, the same warmup), same seeds; each optimizer at its own tuned learning rate
(a sweep over `--adamw-lrs` / `--muon-lrs`, the best final validation loss wins). Muon's non-matrix parameters
(embeddings, norms) run Adam at `--muon-adam-lr`. Two character-level corpora from ../shared/data/text: tinyshakespeare
(nanoGPT's `shakespeare_char`) and Little Women (the shared prose corpus).

The target is tuned AdamW's final validation loss (what AdamW reaches in the whole budget). Tokens to the target:
the first evaluation at which a run's validation loss is at or below it, interpolated linearly between evaluations.
Both runs decay their learning rate over the same horizon, so Muon's intermediate points are not annealed: the ratio
is conservative (a Muon run given the shorter horizon would reach the target sooner, not later).

    .venv/bin/python bench/muon_vs_adamw.py                 # ~40 minutes on 2 idle cores
    .venv/bin/python bench/muon_vs_adamw.py --steps 60 --eval-every 20 --adamw-lrs 2e-3 --muon-lrs 0.02  # a smoke run
"""

import argparse, json, os, tempfile, time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "text"
CORPORA = {"prose_char": "little_women.txt", "shakespeare_char": "tinyshakespeare.txt"}


def config(corpus: str, name: str, lr: float, a, seed: int):
    from marin.train.cli import PRESETS
    from marin.train.optim import OptimizerConfig

    base = PRESETS["nano"]()
    path = str(DATA / CORPORA[corpus])
    opt = dict(learning_rate=lr, warmup=a.warmup, min_lr_ratio=0.1, beta2=0.99, weight_decay=0.1)
    if name == "muon":
        opt.update(name="muon", adam_lr=a.muon_adam_lr)
    return base.replace(
        model=base.model.replace(vocab_size=128),  # every corpus's characters fit (65 and 78 here)
        data=base.data.replace(path=path),
        eval_data=(("val", base.eval_data[0][1].replace(path=path)),),
        optimizer=OptimizerConfig(**opt),
        num_train_steps=a.steps,
        eval_every=a.eval_every,
        eval_batches=a.eval_batches,
        checkpoint=base.checkpoint.replace(every=a.steps),
        seed=seed,
        progress=False,
        tracker="disabled",
    )


def run(cfg, out: str) -> dict:
    "Train; the validation curve as [(tokens, loss)] from the run's metrics (`.tracking/metrics.jsonl`), its wall time."
    from marin.train.trainer import train

    t = time.perf_counter()
    train(cfg, out)
    wall = time.perf_counter() - t
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len * cfg.grad_accum
    curve = []
    for line in Path(out, ".tracking", "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/val/loss" in row:
            curve.append((int(row["step"]) * tokens_per_step, float(row["eval/val/loss"])))
    return {"curve": curve, "wall_s": wall}


def tokens_to(curve: list, target: float) -> float | None:
    "Tokens at which the curve first reaches `target` (linear between evaluations); None if it never does."
    prev = None
    for tok, loss in curve:
        if loss <= target:
            if prev is None:
                return float(tok)
            (t0, l0) = prev
            return t0 + (tok - t0) * (l0 - target) / (l0 - loss)
        prev = (tok, loss)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=25)
    ap.add_argument("--warmup", type=float, default=50)
    ap.add_argument("--adamw-lrs", default="2e-3,4e-3,8e-3")
    ap.add_argument("--muon-lrs", default="0.02,0.04,0.08")
    ap.add_argument("--muon-adam-lr", type=float, default=2e-3)
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="write every run's curve here")
    ap.add_argument("--reuse", default="", help="a --json file of runs with the same settings: those are not rerun")
    a = ap.parse_args()
    same = ("steps", "eval_every", "eval_batches", "warmup", "muon_adam_lr", "seed")
    done = {}
    if a.reuse:  # a grid widened after the fact trains only its new points
        prev = json.loads(Path(a.reuse).read_text())
        if any(prev["args"][k] != getattr(a, k) for k in same):
            raise SystemExit(f"--reuse {a.reuse}: its runs had other settings ({ {k: prev['args'][k] for k in same} })")
        done = {(r["corpus"], r["optimizer"], r["lr"]): r for r in prev["runs"]}
    lrs = {"adamw": [float(x) for x in a.adamw_lrs.split(",")], "muon": [float(x) for x in a.muon_lrs.split(",")]}
    results, table = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in a.corpora.split(","):
            runs = {}
            for name, grid in lrs.items():
                for lr in grid:
                    r = done.get((corpus, name, lr)) or run(
                        config(corpus, name, lr, a, a.seed), os.path.join(tmp, f"{corpus}-{name}-{lr:g}")
                    )
                    r = {"curve": [tuple(x) for x in r["curve"]], "wall_s": r["wall_s"]}
                    runs[(name, lr)] = r
                    results.append({"corpus": corpus, "optimizer": name, "lr": lr, **r})
                    print(
                        f"{corpus:16s} {name:5s} lr {lr:<7g} final val {r['curve'][-1][1]:.4f}  {r['wall_s']:.0f} s",
                        flush=True,
                    )
                    if a.json:  # every run as it finishes: a long sweep cut short keeps what it measured
                        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": results}, indent=1))
            best = {n: min((k for k in runs if k[0] == n), key=lambda k: runs[k]["curve"][-1][1]) for n in lrs}
            for n, (_, lr) in best.items():
                if lr in (min(lrs[n]), max(lrs[n])):
                    print(f"note: {corpus} {n}'s best learning rate {lr:g} is at the edge of its grid: widen it")
            target = runs[best["adamw"]]["curve"][-1][1]
            t_adamw, t_muon = (tokens_to(runs[best[n]]["curve"], target) for n in ("adamw", "muon"))
            table.append(
                (corpus, best["adamw"][1], best["muon"][1], target, runs[best["muon"]]["curve"][-1][1], t_adamw, t_muon)
            )
    print(
        "\n| corpus | AdamW lr (tuned) | Muon lr (tuned) | target: AdamW's final val loss | Muon's final val loss "
        "| AdamW tokens to target | Muon tokens to target | AdamW / Muon tokens |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for corpus, la, lm, target, final_m, ta, tm in table:
        ratio = f"**{ta / tm:.2f}x**" if tm else "Muon never reached it"
        tm_s = f"{tm:,.0f}" if tm else "-"
        print(f"| {corpus} | {la:g} | {lm:g} | {target:.4f} | {final_m:.4f} | {ta:,.0f} | {tm_s} | {ratio} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": results, "table": table}, indent=1))


if __name__ == "__main__":
    main()
