"""`bertconv fill-mask CKPT "text with [MASK]"`: the MLM head's predictions, from any format."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ..config import ACTIVATIONS
from ..errors import bad_input
from ..runtime import weights
from ..runtime.fill_mask import fill_mask
from ..runtime.numerics import DTYPE_MIN, Numerics, family_of
from ..runtime.numpy_bert import NumpyBert
from ..runtime.tokenizer import WordPieceTokenizer
from ..checks.report import checkpoint
from ..runtime.tokenizer_json import TOKENIZER_JSON, JsonTokenizer
from .common import checkpoint_options, load, print_json, stdout

RUNTIMES = ("numpy", "torch")


def parse_mask_adder(ctx, param, text: str | None) -> float | str | None:
    """`--mask-adder`: a number, or DTYPE_MIN."""
    if text is None or text == DTYPE_MIN:
        return text
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a number (e.g. -10000) nor {DTYPE_MIN!r}") from None


@click.command("fill-mask")
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("text")
@click.option("--vocab", "vocab_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The vocab.txt (WordPiece) or tokenizer.json (any Hugging Face tokenizer, through the "
                   "tokenizers library) to tokenize with (default: the vocab.txt beside the checkpoint, else "
                   "its tokenizer.json).")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Predictions per [MASK].")
@click.option("--runtime", type=click.Choice(RUNTIMES), default="numpy", show_default=True,
              help="The NumPy runtime, or torch (an optional extra).")
@click.option("--json", "as_json", is_flag=True, help='Print one JSON object; its "masks" hold per [MASK] its position and {"token", "id", "prob"} each.')
@click.option("--cased/--uncased", "cased", default=None,
              help="Keep case and accents, or lower-case and strip them (default: do_lower_case of a "
                   "tokenizer_config.json beside the vocab, else uncased unless the vocab has upper-case letters).")
@checkpoint_options
@click.option("--act", "activation", type=click.Choice(ACTIVATIONS), default=None,
              help="Activation (default: the config's, as its source format means it: gelu_tanh for Google "
                   "checkpoints, gelu (erf) for Hugging Face and bert4keras).")
@click.option("--layer-norm-eps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="LayerNorm epsilon (default: the config's, else 1e-12).")
@click.option("--mask-adder", default=None, callback=parse_mask_adder,
              help=f"Added to attention scores of padding: a number, or {DTYPE_MIN} (default: the source "
                   f"format's: -10000 Google, {DTYPE_MIN} Hugging Face, -inf bert4keras).")
def command(path: Path, text: str, vocab_path: Path | None, top_k: int, runtime: str, as_json: bool,
            cased: bool | None, config_path, num_heads, activation: str | None, layer_norm_eps: float | None,
            mask_adder: float | str | None) -> None:
    """Predict every [MASK] in TEXT with the checkpoint's MLM head.

    Exit status 1 when the checkpoint has no MLM head.
    """
    tree = load(path, config_path, num_heads)
    numerics = Numerics.for_tree(tree, activation=activation, layer_norm_eps=layer_norm_eps,
                                 mask_adder=mask_adder)
    weights.require_head(weights.plan(tree), "mlm", tree.path, "fill-mask")
    # issue 16: a tokenizer.json (RoBERTa's byte-level BPE, ALBERT's SentencePiece) where no vocab.txt is.
    beside = tree.path if tree.path.is_dir() else tree.path.parent
    vocab_path = vocab_path or tree.vocab or ((beside / TOKENIZER_JSON) if (beside / TOKENIZER_JSON).is_file() else None)
    if vocab_path is None:
        raise bad_input(tree.path, "no vocab.txt or tokenizer.json beside the checkpoint; pass --vocab vocab.txt "
                                   "(or a tokenizer.json)")
    if vocab_path.suffix == ".json":
        if cased is not None:
            raise bad_input(vocab_path, "--cased/--uncased apply to a vocab.txt; a tokenizer.json's own normalizer "
                                        "decides the casing")
        tokenizer = JsonTokenizer(vocab_path)
    else:
        tokenizer = WordPieceTokenizer.from_file(vocab_path, lower_case=None if cased is None else not cased)  # None: decide
    model = _model(runtime, tree, numerics)
    results = fill_mask(model, tokenizer, text, top_k=top_k)
    if as_json:
        print_json({**checkpoint(tree), "ok": True, "text": text, "runtime": runtime,
                    "numerics": numerics.describe(),
                    "tokenizer": {"file": str(vocab_path), "lower_case": getattr(tokenizer, "lower_case", None)},
                    "masks": [{"position": mask.position, "predictions": [p.as_dict() for p in mask.predictions]}
                              for mask in results],
                    "problems": [], "notes": []})
        return
    stdout.print(f"[bold]{escape(str(tree.path))}[/]  format [cyan]{tree.format}[/]  runtime {runtime}")
    stdout.print(f"numerics: {numerics.describe()} (defaults of {family_of(tree.format)})")
    if isinstance(tokenizer, JsonTokenizer):
        stdout.print(f"tokenizer: {escape(str(vocab_path))} (its own normalizer decides the casing)")
    else:
        case = "uncased" if tokenizer.lower_case else "cased"
        why = tokenizer.casing if cased is None else ("--cased" if cased else "--uncased")
        stdout.print(f"tokenizer: {escape(str(vocab_path))}, {case} ({why})")
    for number, mask in enumerate(results, start=1):
        stdout.print(escape(f"{tokenizer.mask_token} #{number} (token {mask.position}):"))
        table = Table("prob", "token", "id", box=None, pad_edge=False)
        for p in mask.predictions:
            token = escape(p.token) if p.token is not None else "(not in vocab.txt)"
            table.add_row(f"{p.prob:.4f}", token, str(p.id))
        stdout.print(table)


def _model(runtime: str, tree, numerics: Numerics):
    if runtime == "torch":
        from ..runtime.torch_bert import TorchBert  # torch is imported only when asked for
        return TorchBert(tree, numerics)
    return NumpyBert(tree, numerics)
