"""`bertconv fill-mask CKPT "text with [MASK]" [TEXT...] [--file F]`: the MLM head's predictions,
from any format, with the checkpoint's own tokenizer."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ..checks.report import checkpoint
from ..config import ACTIVATIONS
from ..errors import BadInput, bad_input
from ..runtime import weights
from ..runtime.fill_mask import check_text, check_vocabulary, predict
from ..runtime.numerics import DTYPE_MIN, Numerics, family_of
from ..runtime.tokenizer import find, open_tokenizer
from . import output
from .common import byte_progress, checkpoint_options, load, stdout

RUNTIMES = ("numpy", "torch")
EXIT_BAD_INPUT = 2


def parse_mask_adder(ctx, param, text: str | None) -> float | str | None:
    """`--mask-adder`: a number, or DTYPE_MIN."""
    if text is None or text == DTYPE_MIN:
        return text
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a number (e.g. -10000) nor {DTYPE_MIN!r}") from None


def read_texts(texts: tuple[str, ...], file: str | None) -> list[str]:
    """The texts of the arguments, then the lines of `file` ("-": stdin), blank lines skipped."""
    lines: list[str] = []
    if file is not None:
        try:
            content = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise bad_input(file, f"cannot read the texts as UTF-8 text: {exc}") from None
        lines = [line for line in content.splitlines() if line.strip()]
    found = [*texts, *lines]
    if not found:
        raise BadInput("no text to fill: give one as an argument, or --file F (one text a line, - for stdin)")
    return found


@click.command("fill-mask")
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("texts", nargs=-1)
@click.option("--file", "texts_file", default=None,
              help="Also read texts from this file, one a line (- reads stdin).")
@click.option("--vocab", "--tokenizer", "vocab_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The tokenizer file: a tokenizer.json, vocab.txt (WordPiece), vocab.json (byte-level BPE, with "
                   "merges.txt beside it) or spiece.model (SentencePiece) (default: the first of these beside the "
                   "checkpoint).")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Predictions per [MASK].")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Texts run through the model at once.")
@click.option("--runtime", type=click.Choice(RUNTIMES), default="numpy", show_default=True,
              help="The NumPy runtime, or torch (an optional extra).")
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object per text (JSON Lines for several); its "masks" hold per [MASK] its '
                   'position and {"token", "id", "prob"} each.')
@click.option("--quiet", "-q", is_flag=True, help="No progress bar while the model loads.")
@click.option("--cased/--uncased", "cased", default=None,
              help="Keep case and accents, or lower-case (for a vocab.txt or spiece.model; default: do_lower_case "
                   "of a tokenizer_config.json beside it, else for a vocab.txt uncased unless it has upper-case "
                   "letters, for a spiece.model uncased).")
@checkpoint_options
@click.option("--act", "activation", type=click.Choice(ACTIVATIONS), default=None,
              help="Activation (default: the config's, as its source format means it: gelu_tanh for Google "
                   "checkpoints, gelu (erf) for Hugging Face and bert4keras).")
@click.option("--layer-norm-eps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="LayerNorm epsilon (default: the config's, else 1e-12).")
@click.option("--mask-adder", default=None, callback=parse_mask_adder,
              help=f"Added to attention scores of padding: a number, or {DTYPE_MIN} (default: the source "
                   f"format's: -10000 Google, {DTYPE_MIN} Hugging Face, -inf bert4keras).")
def command(path: Path, texts: tuple[str, ...], texts_file: str | None, vocab_path: Path | None, top_k: int,
            batch_size: int, runtime: str, as_json: bool, quiet: bool, cased: bool | None, config_path, num_heads,
            activation: str | None, layer_norm_eps: float | None, mask_adder: float | str | None) -> None:
    """Predict every [MASK] in each TEXT with the checkpoint's MLM head.

    Exit status 1 when the checkpoint has no MLM head, 2 when an input (or one of the texts) cannot
    be read or filled.
    """
    all_texts = read_texts(texts, texts_file)
    tree = load(path, config_path, num_heads)
    numerics = Numerics.for_tree(tree, activation=activation, layer_norm_eps=layer_norm_eps,
                                 mask_adder=mask_adder)
    plan = weights.plan(tree)
    weights.require_head(plan, "mlm", tree.path, "fill-mask")
    beside = tree.path if tree.path.is_dir() else tree.path.parent
    vocab_path = vocab_path or find(beside, tree.vocab)
    if vocab_path is None:
        raise bad_input(tree.path, "no tokenizer.json, vocab.txt, vocab.json + merges.txt or spiece.model beside the "
                                   "checkpoint; pass --vocab FILE")
    tokenizer = open_tokenizer(vocab_path, lower_case=None if cased is None else not cased)
    with byte_progress(f"loading {tree.path.name}", weights.plan_nbytes(tree, plan), quiet or as_json) as advance:
        model = _model(runtime, tree, numerics, advance)
    check_vocabulary(model, tokenizer)

    encodings = tokenizer.encode_batch(all_texts)
    errors: dict[int, BadInput] = {}
    for index, (text, encoding) in enumerate(zip(all_texts, encodings)):
        try:
            check_text(model, tokenizer, text, encoding)
        except BadInput as exc:
            if len(all_texts) == 1:
                raise
            errors[index] = exc
    runnable = [i for i in range(len(all_texts)) if i not in errors]
    results = dict(zip(runnable, predict(model, tokenizer, [encodings[i] for i in runnable], top_k=top_k,
                                         batch_size=batch_size)))

    fields = {**checkpoint(tree), "runtime": runtime, "numerics": numerics.describe(),
              "tokenizer": {"file": str(vocab_path), "kind": tokenizer.kind, "lower_case": tokenizer.lower_case}}
    for index, text in enumerate(all_texts):
        if as_json:
            if index in errors:
                report = output.error_object(str(errors[index]), None, path=str(tree.path), index=index, text=text)
            else:
                report = {**fields, "ok": True, "index": index, "text": text,
                          "masks": [{"position": mask.position, "predictions": [p.as_dict() for p in mask.predictions]}
                                    for mask in results[index]],
                          "problems": [], "notes": []}
            output.write("fill-mask", report, lines=len(all_texts) > 1)
        else:
            if index == 0:
                _print_header(tree, runtime, numerics, vocab_path, tokenizer)
            _print_text(index, text, results.get(index), errors.get(index), tokenizer, len(all_texts) > 1)
    if errors:
        raise SystemExit(EXIT_BAD_INPUT)


def _print_header(tree, runtime: str, numerics: Numerics, vocab_path: Path, tokenizer) -> None:
    stdout.print(f"[bold]{escape(str(tree.path))}[/]  format [cyan]{tree.format}[/]  runtime {runtime}")
    stdout.print(f"numerics: {numerics.describe()} (defaults of {family_of(tree.format)})")
    case = "" if tokenizer.lower_case is None else (", uncased" if tokenizer.lower_case else ", cased")
    stdout.print(f"tokenizer: {escape(str(vocab_path))} ({escape(tokenizer.kind)}{case}: {escape(tokenizer.casing)})")


def _print_text(index: int, text: str, masks, error: BadInput | None, tokenizer, several: bool) -> None:
    if several:
        stdout.print(escape(f"text #{index + 1}: {text}"))
    if error is not None:
        stdout.print(f"[red]error[/]: {escape(str(error))}")
        return
    for number, mask in enumerate(masks, start=1):
        stdout.print(escape(f"{tokenizer.mask_token} #{number} (token {mask.position}):"))
        table = Table("prob", "token", "id", box=None, pad_edge=False)
        for p in mask.predictions:
            token = escape(p.token) if p.token is not None else "(not in the vocabulary)"
            table.add_row(f"{p.prob:.4f}", token, str(p.id))
        stdout.print(table)


def _model(runtime: str, tree, numerics: Numerics, on_tensor):
    if runtime == "torch":
        from ..runtime.torch_bert import TorchBert  # torch is imported only when asked for
        return TorchBert(tree, numerics, on_tensor=on_tensor)
    from ..runtime.numpy_bert import NumpyBert
    return NumpyBert(tree, numerics, on_tensor=on_tensor)
