"""`bertconv fill-mask CKPT "text with [MASK]" [TEXT...] [--file F]`: the MLM head's predictions,
from any format, with the checkpoint's own tokenizer."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentTypeError
from pathlib import Path

from ..api.fill_mask import BATCH_SIZE, TOP_K, FillMaskReport, fill_mask
from ..config import ACTIVATIONS
from ..errors import BadInput, bad_input
from ..runtime import weights
from ..runtime.numerics import DTYPE_MIN, family_of
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
    option("--top-k", type=positive_int, default=TOP_K, metavar="K", help="Predictions per [MASK] (default: %(default)s)."),
    option("--batch-size", type=positive_int, default=BATCH_SIZE, metavar="N",
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
    with byte_progress(f"loading {tree.path.name}", lambda: weights.plan_nbytes(tree, weights.plan(tree)),
                       quiet or as_json) as advance:
        filled = fill_mask(tree, all_texts[0] if len(all_texts) == 1 else all_texts, vocab=vocab_path, top_k=top_k,
                           batch_size=batch_size, runtime=runtime, cased=cased, act=activation,
                           layer_norm_eps=layer_norm_eps, mask_adder=mask_adder, accept_loss=accept_loss,
                           on_tensor=advance)
    reports = [filled] if isinstance(filled, FillMaskReport) else list(filled)
    for report in reports:
        if as_json:
            output.write("fill-mask", report.to_json(), lines=len(reports) > 1)
            continue
        if report.index == 0:
            for note in report.notes:
                stderr.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)
            _print_header(report)
        _print_text(report, len(reports) > 1)
    if any(report.error is not None for report in reports):
        raise SystemExit(EXIT_BAD_INPUT)


def _print_header(report: FillMaskReport) -> None:
    stdout.print(f"[bold]{escape(str(report.checkpoint.path))}[/]  format [cyan]{report.checkpoint.format}[/]  "
                 f"runtime {report.runtime}")
    stdout.print(f"numerics: {report.numerics} (defaults of {family_of(report.checkpoint.format)})")
    tokenizer = report.tokenizer
    case = "" if tokenizer.lower_case is None else (", uncased" if tokenizer.lower_case else ", cased")
    stdout.print(f"tokenizer: {escape(str(tokenizer.file))} ({escape(tokenizer.kind)}{case}: "
                 f"{escape(str(tokenizer.casing))})")
    if tokenizer.settings:
        settings = ", ".join(f"{key}={json.dumps(value)}" for key, value in tokenizer.settings.items())
        stdout.print(f"tokenizer settings: {escape(settings)}")


def _print_text(report: FillMaskReport, several: bool) -> None:
    if several:
        stdout.print(escape(f"text #{report.index + 1}: {report.text}"))
    if report.error is not None:
        stdout.print(f"[red]error[/]: {escape(report.error)}")
        return
    for number, mask in enumerate(report.masks, start=1):
        stdout.print(escape(f"{report.tokenizer.mask_token} #{number} (token {mask.position}):"))
        table = Table("prob", "token", "id")
        for p in mask.predictions:
            token = escape(p.token) if p.token is not None else "(not in the vocabulary)"
            table.add_row(f"{p.prob:.4f}", token, str(p.id))
        stdout.print(table)
