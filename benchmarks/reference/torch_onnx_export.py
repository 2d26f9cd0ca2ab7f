"""What a user runs without bertconv: transformers 5 loads the masked LM, torch.onnx.export writes it.

    python benchmarks/reference/torch_onnx_export.py HF_DIRECTORY OUT.onnx

TorchScript's exporter (dynamo=False: the dynamo exporter needs onnxscript, which torch does not
install), opset 17, batch and sequence dynamic, the weights inside the file as bertconv's (2 GB
and under).
"""

from __future__ import annotations

import sys

import torch
import transformers


def main(directory: str, out: str) -> None:
    model = transformers.AutoModelForMaskedLM.from_pretrained(directory, dtype=torch.float32).eval()
    ids = torch.ones((2, 8), dtype=torch.int64)
    inputs = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {"logits": {0: "batch", 1: "sequence"}}
    with torch.no_grad():
        torch.onnx.export(model, inputs, out, input_names=names, output_names=["logits"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
