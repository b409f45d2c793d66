"A tiny training step shared by the cluster and resume tests: the trainer's tiniest model, on character data whose batches can be slowed down."

import dataclasses, time
from marin.models.transformer import LlamaConfig
from marin.train.checkpoint import CheckpointConfig
from marin.train.optim import OptimizerConfig
from marin.train.trainer import CharDataConfig, TrainConfig


@dataclasses.dataclass(frozen=True)
class SlowCharData(CharDataConfig):
    "Character data whose batches take `delay` seconds (not versioned): time to kill a node mid-run."

    delay: float = 0.0

    def build(self):
        ld = super().build()
        fast = ld.batch

        def batch(step):
            time.sleep(self.delay)
            return fast(step)

        ld.batch = batch
        return ld


def tiny_train_config(delay: float = 0.0, steps: int = 30) -> TrainConfig:
    "2 layers, d_model 32, checkpoints every 5 steps (the trainer tests' tiniest model)."
    return TrainConfig(
        model=LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64),
        data=SlowCharData(batch_size=8, seq_len=32, delay=delay),
        num_train_steps=steps,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=3),
        tracker="disabled",
        checkpoint=CheckpointConfig(every=5, keep_last=2),
        progress=False,
        log_every=5,
    )
