"""Cached outputs are named by config hashes. A change to a config class that re-keys them makes every cached run in
every lab retrain silently (session 3's `CheckpointConfig.format` did, for the whole scaling ladder). These pins fail
first. A field added later must be declared with `marin.core.config.added(default)`; a change that is meant to
re-key outputs updates the pins and says why in its commit."""

from marin.core.config import config_hash, version_hash
from marin.core.executor import Step
from marin.models.transformer import LlamaConfig
from marin.scaling.sweep import ScalingRunConfig, scaling_run
from marin.train.trainer import SyntheticDataConfig, TrainConfig

FIX = (
    "declare a new config field with marin.core.config.added(default) so that outputs made before it keep their "
    "names; if re-keying every cached output is intended, update this pin and say so in the commit"
)


def _train_config() -> TrainConfig:
    model = LlamaConfig(vocab_size=512, seq_len=128, d_model=48, n_layers=2, n_heads=3, n_kv_heads=3, d_ff=128)
    return TrainConfig(
        model=model, data=SyntheticDataConfig(vocab_size=512, batch_size=16, seq_len=128), num_train_steps=100
    )


def test_train_config_hashes_are_pinned():
    cfg = _train_config()
    assert (version_hash(cfg), config_hash(cfg)) == PINNED_TRAIN, FIX


def test_scaling_step_name_is_pinned():
    # ScalingRunConfig versions its whole TrainConfig, checkpoint and mesh settings included: the strictest case
    step = Step(
        "scaling/pin/C1e12-d48L2", scaling_run, ScalingRunConfig(train=_train_config(), budget=1e12, sweep="pin")
    )
    assert step.output_name == PINNED_SCALING_STEP, FIX


PINNED_TRAIN = ("1b7f1259d816ef87", "0d6eed6ab4058ad5")
PINNED_SCALING_STEP = "scaling/pin/C1e12-d48L2-fc808987ba"  # e413e1a (format re-keyed it) gave ...-647309d0fb
