"""`bertconv fill-mask CKPT "text with [MASK]" [TEXT...] [--file F]`: the MLM head's predictions,
from any format, with the checkpoint's own tokenizer."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentTypeError
from pathlib import Path

from ..checks.contract import require_read
from ..checks.report import checkpoint
from ..config import ACTIVATIONS
from ..errors import BadInput, bad_input
from ..runtime import weights
from ..runtime.fill_mask import check_masked_lm, check_text, check_vocabulary, predict, vocabulary_shortfall
from ..runtime.numerics import DTYPE_MIN, Numerics, family_of
from ..runtime.tokenizer import find, open_tokenizer
from . import output
from .arguments import Toggle, file_path, json_flag, option, positive_float, positive_int
from .common import ACCEPT_LOSS, CHECKPOINT_OPTIONS, Table, byte_progress, escape, load, stderr, stdout

RUNTIMES = ("numpy", "torch")
EXIT_BAD_INPUT = 2


def parse_mask_adder(text: str) -> float | str:
    """`--mask-adder`: a number, or DTYPE_MIN."""
    if text == DTYPE_MIN:
        return text
    try:
        return float(text)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is neither a number (e.g. -10000) nor {DTYPE_MIN!r}") from None


def read_texts(texts: list[str], file: str | None) -> list[str]:
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


ARGUMENTS = (
    option("path", type=Path, metavar="PATH",
           help="A checkpoint with an MLM head: a file, or a directory holding one."),
    option("texts", nargs="*", metavar="TEXT", help="A text holding one or more [MASK] tokens."),
    option("--file", dest="texts_file", metavar="FILE",
           help="Also read texts from this file, one a line (- reads stdin)."),
    option("--vocab", "--tokenizer", dest="vocab_path", type=file_path, metavar="FILE",
           help="The tokenizer file: a tokenizer.json, vocab.txt (WordPiece), vocab.json (byte-level BPE, with "
                "merges.txt beside it) or spiece.model (SentencePiece) (default: the first of these beside the "
                "checkpoint)."),
    option("--top-k", type=positive_int, default=5, metavar="K", help="Predictions per [MASK] (default: %(default)s)."),
    option("--batch-size", type=positive_int, default=16, metavar="N",
           help="Texts run through the model at once (default: %(default)s)."),
    option("--runtime", choices=RUNTIMES, default="numpy",
           help="The NumPy runtime, or torch (an optional extra) (default: %(default)s)."),
    json_flag('Print one JSON object per text (JSON Lines for several); its "masks" hold per [MASK] its position '
              'and {"token", "id", "prob"} each.'),
    option("--quiet", "-q", action="store_true", help="No progress bar while the model loads."),
    option("--cased", "--uncased", action=Toggle,
           help="Keep case and accents, or lower-case (for a vocab.txt or spiece.model; default: do_lower_case of a "
                "tokenizer_config.json beside it, else uncased, as transformers' BertTokenizer and AlbertTokenizer "
                "default)."),
    *CHECKPOINT_OPTIONS,
    ACCEPT_LOSS,
    option("--act", dest="activation", choices=ACTIVATIONS,
           help="Activation (default: the config's, as its source format means it: gelu_tanh for Google "
                "checkpoints, gelu (erf) for Hugging Face and bert4keras)."),
    option("--layer-norm-eps", type=positive_float, metavar="EPS",
           help="LayerNorm epsilon (default: the config's, else 1e-12)."),
    option("--mask-adder", type=parse_mask_adder, metavar="NUMBER",
           help=f"Added to attention scores of padding: a number, or {DTYPE_MIN} (default: the source format's: "
                f"-10000 Google, {DTYPE_MIN} Hugging Face, -inf bert4keras)."),
)


def command(path: Path, texts: list[str], texts_file: str | None, vocab_path: Path | None, top_k: int,
            batch_size: int, runtime: str, as_json: bool, quiet: bool, cased: bool | None, config_path: Path | None,
            num_heads: int | None, model: str | None, revision: str | None, activation: str | None,
            layer_norm_eps: float | None, mask_adder: float | str | None, accept_loss: list[str]) -> None:
    """Predict every [MASK] in each TEXT with the checkpoint's MLM head.

    Exit status 1 when the checkpoint has no MLM head, 2 when an input (or one of the texts) cannot
    be read or filled.
    """
    all_texts = read_texts(texts, texts_file)
    tree = load(path, config_path, num_heads, model, revision)
    notes = require_read(tree, accept_loss)
    numerics = Numerics.for_tree(tree, activation=activation, layer_norm_eps=layer_norm_eps,
                                 mask_adder=mask_adder)
    plan = weights.plan(tree)
    weights.require_head(plan, "mlm", tree.path, "fill-mask")
    check_masked_lm(tree.config, tree.path)
    beside = tree.path if tree.path.is_dir() else tree.path.parent
    vocab_path = vocab_path or find(beside, tree.vocab)
    if vocab_path is None:
        raise bad_input(tree.path, "no tokenizer.json, vocab.txt, vocab.json + merges.txt or spiece.model beside the "
                                   "checkpoint; pass --vocab FILE")
    tokenizer = open_tokenizer(vocab_path, lower_case=None if cased is None else not cased)
    with byte_progress(f"loading {tree.path.name}", weights.plan_nbytes(tree, plan), quiet or as_json) as advance:
        model = _model(runtime, tree, numerics, advance)
    check_vocabulary(model, tokenizer)
    notes = [*tokenizer.notes, *filter(None, [vocabulary_shortfall(model, tokenizer)])]
    if not as_json:
        for note in notes:
            stderr.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)

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
              "tokenizer": {"file": str(vocab_path), "kind": tokenizer.kind, "lower_case": tokenizer.lower_case,
                            "casing": tokenizer.casing, "settings": tokenizer.settings}}
    for index, text in enumerate(all_texts):
        if as_json:
            if index in errors:
                report = output.error_object(str(errors[index]), None, path=str(tree.path), index=index, text=text)
            else:
                report = {**fields, "ok": True, "index": index, "text": text,
                          "masks": [{"position": mask.position, "predictions": [p.as_dict() for p in mask.predictions]}
                                    for mask in results[index]],
                          "problems": [], "notes": notes}
            output.write("fill-mask", report, lines=len(all_texts) > 1)
        else:
            if index == 0:
                _print_header(tree, runtime, numerics, vocab_path, tokenizer)
                for note in notes:
                    stderr.print(f"note: {escape(note)}", soft_wrap=True)
            _print_text(index, text, results.get(index), errors.get(index), tokenizer, len(all_texts) > 1)
    if errors:
        raise SystemExit(EXIT_BAD_INPUT)


def _print_header(tree, runtime: str, numerics: Numerics, vocab_path: Path, tokenizer) -> None:
    stdout.print(f"[bold]{escape(str(tree.path))}[/]  format [cyan]{tree.format}[/]  runtime {runtime}")
    stdout.print(f"numerics: {numerics.describe()} (defaults of {family_of(tree.format)})")
    case = "" if tokenizer.lower_case is None else (", uncased" if tokenizer.lower_case else ", cased")
    stdout.print(f"tokenizer: {escape(str(vocab_path))} ({escape(tokenizer.kind)}{case}: {escape(tokenizer.casing)})")
    if tokenizer.settings:
        settings = ", ".join(f"{key}={json.dumps(value)}" for key, value in tokenizer.settings.items())
        stdout.print(f"tokenizer settings: {escape(settings)}")


def _print_text(index: int, text: str, masks, error: BadInput | None, tokenizer, several: bool) -> None:
    if several:
        stdout.print(escape(f"text #{index + 1}: {text}"))
    if error is not None:
        stdout.print(f"[red]error[/]: {escape(str(error))}")
        return
    for number, mask in enumerate(masks, start=1):
        stdout.print(escape(f"{tokenizer.mask_token} #{number} (token {mask.position}):"))
        table = Table("prob", "token", "id")
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
