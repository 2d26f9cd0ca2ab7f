"""The fixtures of every registered format, by `convert --to` target: what the tests read,
convert, keep untouched (`FIXTURES_OF`: glob patterns under fixtures/, each match a path the
reader takes, a directory holding one checkpoint or the checkpoint's file) and mutate
(`FUZZ_OF`: files whose mutants every reader must read or refuse cleanly, tests/test_fuzz_formats.py).
tests/test_registry.py checks that every format has its entries here (an export has none).
"""

from __future__ import annotations

from pathlib import Path

from bertconv.formats.registry import Format

FIXTURES_OF: dict[str, tuple[str, ...]] = {
    "hf": ("hf/*", "family_hf/*/*", "prenorm/*/*", "modernbert/*", "roformer/hf/*", "nezha/hf/*",
           "deberta/*/*"),
    "tf": ("tf/*", "tf_hub/*", "family_google/tf/*", "albert_zh/tf", "roformer/tf/*", "nezha/tf/*"),
    "bert4keras": (
        "bert4keras/*",
        "bert4keras_pretraining/nested/bert_model.h5",
        "bert4keras_pretraining/weights-h5/bert_model.weights.h5",
        "family_google/bert4keras/*",
        "roformer/bert4keras/*",
        "nezha/bert4keras/*",
        "roformer_v2/bert4keras/*",
    ),
    "bert4keras-tf": ("bert4keras_pretraining/*/bert_model.ckpt.index",),
    "hf-tf": ("hf_tf/*", "family_hf_tf/*/*"),
    "hf-flax": ("hf_flax/*", "family_hf_flax/*/*"),
    "tf-garden": ("tf2/garden-encoder", "tf2/garden-model-adam", "tf2/garden-pretrainer", "tf2/garden-nsp"),
    "tf-hub-savedmodel": ("tf2/hub-savedmodel", "tf2/garden-functional"),
    "bert-for-tf2": ("tf2/bert-for-tf2", "tf2/bert-for-tf2-h5"),
    "keras-bert": ("keras_bert/*/*.h5",),
    "fairseq": ("family_google/fairseq/*",),
    "keras-hub": ("keras_hub/*",),
    "fair-esm": ("fair_esm/*",),
    "megatron-lm": ("megatron_lm/*",),
}

FUZZ_OF: dict[str, tuple[str, ...]] = {
    "hf": (
        "hf/pretraining/model.safetensors",
        "hf/pretraining_bin/pytorch_model.bin",
        "hf/legacy_bin/pytorch_model.bin",
        "family_hf/albert/pretraining_bin/pytorch_model.bin",
    ),
    "tf": ("tf/two_shards/bert_model.ckpt.index",),
    "bert4keras": (
        "bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5",
        "bert4keras_pretraining/weights-h5/bert_model.weights.h5",
    ),
    "bert4keras-tf": ("bert4keras_pretraining/pool-nsp-mlm/bert_model.ckpt.index",),
    "hf-tf": ("hf_tf/pretraining/tf_model.h5",),
    "hf-flax": ("hf_flax/pretraining/flax_model.msgpack",),
    "tf-garden": ("tf2/garden-pretrainer/bert_model.ckpt.index",),
    "tf-hub-savedmodel": ("tf2/hub-savedmodel/variables/variables.index",),
    "bert-for-tf2": ("tf2/bert-for-tf2/bert_model.ckpt.index", "tf2/bert-for-tf2-h5/bert_model.h5"),
    "keras-bert": ("keras_bert/pretraining/weights.h5",),
    "fairseq": ("family_google/fairseq/roberta/model.pt",),
    "keras-hub": ("keras_hub/bert/model.weights.h5", "keras_hub/bert/task.weights.h5"),
    "fair-esm": ("fair_esm/released/esm2_t2_16_fixture.pt",),
    "megatron-lm": ("megatron_lm/v3/release/mp_rank_00/model_optim_rng.pt",),
}


def fixture_paths(fmt: Format, root: Path) -> list[Path]:
    """Every path under `root` (the fixtures directory) that the format's patterns match, sorted."""
    return sorted({path for pattern in FIXTURES_OF.get(fmt.target, ()) for path in Path(root).glob(pattern)})
