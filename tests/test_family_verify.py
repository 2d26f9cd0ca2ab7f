"""verify on an ELECTRA discriminator: it looks at the replaced-token-detection head, not an MLM.

The discriminator's head (google-research/electra `discriminator_predictions`, transformers
`ElectraDiscriminatorPredictions`) is a dense layer and a one-logit output; verify reports it
complete, partial or missing, judges it trained by its fresh-init signs (zero biases), and
claims no MLM verdict. Exit codes as elsewhere: 0 ok, 1 a failed check.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import FIXTURES, needs, real_file, run_in_process
from bertconv import formats
from bertconv.checks.verify import verify
from bertconv.containers.tensorflow import bundle_write as tf_bundle_write

TF_ELECTRA = FIXTURES / "family_google" / "tf" / "electra"
HF_DISCRIMINATOR = FIXTURES / "family_hf" / "electra" / "discriminator"


def _json(*args) -> tuple[int, dict]:
    result = run_in_process("verify", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("args", [(TF_ELECTRA, "--model", "discriminator"), (HF_DISCRIMINATOR,)])
def test_a_discriminator_is_verified_by_its_rtd_head_and_claims_no_mlm_verdict(args):
    code, report = _json(*args)
    assert code == 0 and report["ok"], report["problems"]
    assert report["verified_head"] == "rtd"
    assert report["rtd"] == {"head": "complete", "missing": [],
                             "trained": {"verdict": "trained", "evidence": "signs", "signs": []}}
    assert report["mlm_trained"]["verdict"] == "n/a" and report["tying"] == "n/a"
    assert not any("MLM head" in p for p in report["problems"])
    human = run_in_process("verify", *args)
    assert "RTD head:     complete" in human.stdout and "MLM head:     n/a" in human.stdout


def test_the_generator_of_the_same_file_is_still_verified_as_a_masked_lm():
    code, report = _json(TF_ELECTRA)
    assert code == 0 and report["verified_head"] == "mlm" and report["rtd"] is None
    assert report["mlm_head"] == "complete" and report["mlm_trained"]["verdict"] == "trained"


def _hf_discriminator(tmp_path, change):
    """A copy of the HF discriminator whose tensors `change(dict)` edits in place."""
    safetensors = needs("safetensors.numpy")

    directory = tmp_path / "disc"
    shutil.copytree(HF_DISCRIMINATOR, directory)
    tensors = safetensors.load_file(directory / "model.safetensors")
    change(tensors)
    safetensors.save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def test_zero_rtd_biases_are_a_freshly_initialized_head(tmp_path):
    def zero_biases(tensors):
        for name in ("discriminator_predictions.dense.bias", "discriminator_predictions.dense_prediction.bias"):
            tensors[name] = np.zeros_like(tensors[name])

    directory = _hf_discriminator(tmp_path, zero_biases)
    code, report = _json(directory)
    assert code == 1 and report["rtd"]["trained"]["verdict"] == "untrained"
    assert report["rtd"]["trained"]["signs"] == ["rtd_dense_bias_zero", "rtd_output_bias_zero"]
    assert any("untrained replaced-token-detection head" in p and "discriminator_predictions.dense.bias" in p
               for p in report["problems"])
    code, report = _json(directory, "--allow-untrained-mlm")
    assert code == 0 and any("untrained RTD head, allowed" in n for n in report["notes"])


def test_one_zero_bias_is_enough_to_tell(tmp_path):
    def zero_output_bias(tensors):
        name = "discriminator_predictions.dense_prediction.bias"
        tensors[name] = np.zeros_like(tensors[name])

    code, report = _json(_hf_discriminator(tmp_path, zero_output_bias))
    assert code == 1 and report["rtd"]["trained"]["signs"] == ["rtd_output_bias_zero"]


def test_a_partial_rtd_head_fails_naming_what_it_lacks(tmp_path):
    def drop_output(tensors):
        del tensors["discriminator_predictions.dense_prediction.weight"]
        del tensors["discriminator_predictions.dense_prediction.bias"]

    code, report = _json(_hf_discriminator(tmp_path, drop_output))
    assert code == 1 and report["rtd"]["head"] == "partial"
    assert report["rtd"]["missing"] == ["rtd.output.kernel", "rtd.output.bias"]
    assert any(p.startswith("partial replaced-token-detection head") for p in report["problems"])


def test_a_discriminator_read_without_its_head_says_the_rtd_head_is_missing(tmp_path):
    """The discriminator's encoder alone (`electra/...`), as a fine-tuning export keeps it."""
    source = formats.read(TF_ELECTRA, model="discriminator")
    encoder = [(p.source, p.tensor.dtype, tuple(p.tensor.shape), p.tensor.read) for p in source
               if p.source.startswith("electra/")]
    (tmp_path / "encoder").mkdir()
    tf_bundle_write.write_bundle(tmp_path / "encoder" / "bert_model.ckpt", encoder)
    shutil.copy(TF_ELECTRA / "discriminator_config.json", tmp_path / "encoder")
    tree = formats.read(tmp_path / "encoder" / "bert_model.ckpt.index", model="discriminator")
    report = verify(tree)
    assert not report["ok"] and report["verified_head"] == "rtd" and report["rtd"]["head"] == "missing"
    assert any(p.startswith("no replaced-token-detection head") for p in report["problems"])
    assert verify(tree, allow_missing_mlm=True)["ok"]


def test_the_mlm_probe_does_not_apply_to_a_discriminator():
    code, report = _json(HF_DISCRIMINATOR, "--probe")
    assert code == 0 and report["mlm_trained"]["probe"] is None
    assert "replaced-token detection" in report["mlm_trained"]["probe_not_run"]


def test_deep_verify_of_a_discriminator_passes():
    code, report = _json(TF_ELECTRA, "--model", "discriminator", "--deep")
    assert code == 0 and report["deep"]["tensors"] == len(formats.read(TF_ELECTRA, model="discriminator").params)


def test_the_real_discriminators_index_is_verified_from_its_headers(tmp_path):
    stem = "electra-180g-small"
    shutil.copy(real_file(f"{stem}.ckpt.index"), tmp_path / f"{stem}.ckpt.index")
    for name in ("generator_config.json", "discriminator_config.json"):
        shutil.copy(real_file(f"{stem}.{name}"), tmp_path / f"{stem}.{name}")
    code, report = _json(tmp_path / f"{stem}.ckpt.index", "--model", "discriminator", "--headers-only")
    assert code == 0 and report["rtd"]["head"] == "complete"
    assert report["rtd"]["trained"] == {"verdict": "n/a", "evidence": "data file absent", "signs": []}
