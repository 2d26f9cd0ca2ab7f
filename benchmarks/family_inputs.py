"""Build one family's benchmark input with transformers (run by the Python whose transformers has
the family; standard library and transformers only, so any environment can run it):

  - the masked-LM model of the declared size with random weights (`AutoConfig.for_model` +
    `AutoModelForMaskedLM.from_config`, torch seeded), saved by `save_pretrained`;
  - the tokenizer of a committed fixture (`AutoTokenizer.from_pretrained`), saved by
    `save_pretrained`, its vocabulary padded with filler tokens to the model's size, so that
    loading it costs what loading the real one does and every row the model predicts has a token.

The config's special-token ids (`*_token_id`) come from the fixture's config.json, which agrees
with its tokenizer; the declared fields override them.

usage: python benchmarks/family_inputs.py SPEC_JSON OUT_DIR
  SPEC_JSON: {"config": {"model_type": ..., fields...}, "tokenizer": FIXTURE_DIR, "seed": N}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: A filler token: angle brackets keep it out of any word of a text (WordPiece and Metaspace
#: split on punctuation; a byte-level BPE has no merges that reach it).
FILLER = "<filler{}>"


def pad_tokenizer_json(path: Path, size: int) -> int:
    """Add filler tokens to a tokenizer.json's model vocabulary until its ids cover 0..size-1;
    the number added. WordPiece and BPE vocabularies map token -> id (ids held by added tokens
    stay theirs); a Unigram's is a list of [piece, score] whose position is the id, left as it is
    when added tokens follow it."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    added = {token["id"] for token in data.get("added_tokens", [])}
    if isinstance(vocab, dict):
        taken = set(vocab.values()) | added
        free = [i for i in range(size) if i not in taken]
        vocab.update((FILLER.format(i), i) for i in free)
    else:
        if any(i >= len(vocab) for i in added):  # DeBERTa-v3's [MASK] follows its pieces: fillers by position
            return 0  # would take its id, so none is added (deberta-v3-base's own is 128,001 of 128,100 rows)
        lowest = min(score for _, score in vocab) if vocab else 0.0
        free = list(range(len(vocab), size))
        vocab.extend([FILLER.format(i), lowest - 10.0] for i in free)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return len(free)


def pad_vocab_txt(path: Path, size: int) -> int:
    """Append filler lines to a vocab.txt (id = line number) up to `size` tokens; the number added."""
    tokens = path.read_text(encoding="utf-8").splitlines()
    fillers = [FILLER.format(i) for i in range(len(tokens), size)]
    if fillers:
        path.write_text("\n".join(tokens + fillers) + "\n", encoding="utf-8")
    return len(fillers)


def build(spec: dict, out: Path) -> None:
    import torch
    import transformers

    fixture = Path(spec["tokenizer"])
    fields = {key: value for key, value in json.loads((fixture / "config.json").read_text()).items()
              if key.endswith("_token_id")}
    fields.update(spec["config"])
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(spec["seed"])
    model = transformers.AutoModelForMaskedLM.from_config(config)
    model.save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(fixture).save_pretrained(out)
    for name, pad in (("tokenizer.json", pad_tokenizer_json), ("vocab.txt", pad_vocab_txt)):
        if (out / name).exists():
            pad(out / name, config.vocab_size)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    build(json.loads(sys.argv[1]), Path(sys.argv[2]))
