"""`fill_mask`: the MLM head's predictions for every [MASK] of each text, from any format, with the
checkpoint's own tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, overload

from ..records import record
from .report import Checkpoint, Report, frozen, tree_of

if TYPE_CHECKING:
    from ..runtime.fill_mask import MaskPredictions
    from .report import JSONObject, PathArg, Source

#: `top_k`'s and `batch_size`'s defaults.
TOP_K, BATCH_SIZE = 5, 16


@record
class TokenizerInfo:
    """The tokenizer the texts were encoded with: its `file`, what it is (`kind`), whether it
    lower-cases (None: its own normalizer decides) and why (`casing`), the transformers
    `settings` it was built with, and its `mask_token` ("[MASK]", RoBERTa's "<mask>")."""

    file: Path
    kind: str
    lower_case: bool | None
    casing: str | None
    settings: Mapping[str, Any]
    mask_token: str


@record
class FillMaskReport(Report):
    """The predictions for one text (the `index`-th given): per mask, its `position` (counting
    [CLS] as 0) and its `predictions` (token, id, prob), most probable first. A text that could
    not be filled (no mask, too long) among several is a report with ok False and its `error`;
    `notes`: what the tokenizer's user should hear (a vocabulary shorter than the embeddings)."""

    command = "fill-mask"

    checkpoint: Checkpoint
    runtime: str
    numerics: str
    tokenizer: TokenizerInfo
    index: int
    text: str
    masks: tuple[MaskPredictions, ...]
    error: str | None = None

    def require_ok(self) -> FillMaskReport:
        if self.error is not None:
            from ..errors import BadInput

            raise BadInput(self.error)
        return self


@overload
def fill_mask(checkpoint: Source, texts: str, *, vocab: PathArg | None = ..., top_k: int = ..., batch_size: int = ...,
              runtime: str = ..., cased: bool | None = ..., config: PathArg | None = ..., heads: int | None = ...,
              model: str | None = ..., act: str | None = ..., layer_norm_eps: float | None = ...,
              mask_adder: float | str | None = ..., accept_loss: tuple[str, ...] | list[str] = ...,
              on_tensor: Callable[[int], None] | None = ...) -> FillMaskReport: ...
@overload
def fill_mask(checkpoint: Source, texts: list[str] | tuple[str, ...], *, vocab: PathArg | None = ..., top_k: int = ..., batch_size: int = ...,
              runtime: str = ..., cased: bool | None = ..., config: PathArg | None = ..., heads: int | None = ...,
              model: str | None = ..., act: str | None = ..., layer_norm_eps: float | None = ...,
              mask_adder: float | str | None = ..., accept_loss: tuple[str, ...] | list[str] = ...,
              on_tensor: Callable[[int], None] | None = ...) -> tuple[FillMaskReport, ...]: ...


def fill_mask(checkpoint: Source, texts: str | Sequence[str], *, vocab: PathArg | None = None, top_k: int = TOP_K,
              batch_size: int = BATCH_SIZE, runtime: str = "numpy", cased: bool | None = None,
              config: PathArg | None = None, heads: int | None = None, model: str | None = None,
              act: str | None = None, layer_norm_eps: float | None = None, mask_adder: float | str | None = None,
              accept_loss: tuple[str, ...] | list[str] = (),
              on_tensor: Callable[[int], None] | None = None) -> FillMaskReport | tuple[FillMaskReport, ...]:
    """Predict every [MASK] of `texts` (one text: its report; a list: one report each) with the
    checkpoint's MLM head: `bertconv fill-mask CKPT TEXT...`, its options as keywords. `vocab`:
    the tokenizer file (default: the one beside the checkpoint); `cased`: keep case (True) or
    lower-case (False) a vocab.txt or spiece.model; `act`, `layer_norm_eps`, `mask_adder`: the
    numerics (default: the source format's); `runtime`: "numpy" or "torch". Raises `CheckFailed`
    when the checkpoint has no MLM head, `BadInput` when an input cannot be read, or a single
    text cannot be filled (among several, its report says why).

    >>> report = bertconv.fill_mask(FIXTURES / "trained/hf", "the cat [MASK] on the mat", top_k=2)
    >>> report.ok, len(report.masks), len(report.masks[0].predictions)
    (True, 1, 2)
    """
    from ..checks.contract import require_read
    from ..checks.report import checkpoint as checkpoint_fields
    from ..errors import BadInput, bad_input
    from ..runtime import weights
    from ..runtime.fill_mask import check_masked_lm, check_text, check_vocabulary, predict, vocabulary_shortfall
    from ..runtime.numerics import Numerics
    from ..runtime.tokenization.select import find, open_tokenizer

    all_texts = [texts] if isinstance(texts, str) else list(texts)
    if not all_texts:
        raise BadInput("no text to fill: give one as an argument, or --file F (one text a line, - for stdin)")
    tree = tree_of(checkpoint, config=config, heads=heads, model=model)
    accepted = require_read(tree, accept_loss)
    numerics = Numerics.for_tree(tree, activation=act, layer_norm_eps=layer_norm_eps, mask_adder=mask_adder)
    plan = weights.plan(tree)
    weights.require_head(plan, "mlm", tree.path, "fill-mask")
    check_masked_lm(tree.config, tree.path)
    beside = tree.path if tree.path.is_dir() else tree.path.parent
    vocab_path = Path(vocab) if vocab is not None else find(beside, tree.vocab)
    if vocab_path is None:
        raise bad_input(tree.path, "no tokenizer.json, vocab.txt, vocab.json + merges.txt or spiece.model beside the "
                                   "checkpoint; pass --vocab FILE")
    tokenizer = open_tokenizer(vocab_path, lower_case=None if cased is None else not cased,
                               family=tree.config.model_type)
    runner = _model(runtime, tree, numerics, on_tensor)
    check_vocabulary(runner, tokenizer)
    notes = (*accepted, *tokenizer.notes, *filter(None, [vocabulary_shortfall(runner, tokenizer)]))

    encodings = tokenizer.encode_batch(all_texts)
    errors: dict[int, str] = {}
    for index, (text, encoding) in enumerate(zip(all_texts, encodings)):
        try:
            check_text(runner, tokenizer, text, encoding)
        except BadInput as exc:
            if len(all_texts) == 1:
                raise
            errors[index] = str(exc)
    runnable = [i for i in range(len(all_texts)) if i not in errors]
    results = dict(zip(runnable, predict(runner, tokenizer, [encodings[i] for i in runnable], top_k=top_k,
                                         batch_size=batch_size)))

    fields: JSONObject = {**checkpoint_fields(tree), "runtime": runtime, "numerics": numerics.describe(),
                          "tokenizer": {"file": str(vocab_path), "kind": tokenizer.kind,
                                        "lower_case": tokenizer.lower_case, "casing": tokenizer.casing,
                                        "settings": tokenizer.settings}}
    described = Checkpoint.from_json(fields)
    used = TokenizerInfo(vocab_path, tokenizer.kind, tokenizer.lower_case, tokenizer.casing,
                         frozen(tokenizer.settings), tokenizer.mask_token)

    def report(obj: JSONObject, index: int, masks: tuple[MaskPredictions, ...], error: str | None) -> FillMaskReport:
        return FillMaskReport(**FillMaskReport.verdict(obj), checkpoint=described, runtime=runtime,
                              numerics=numerics.describe(), tokenizer=used, index=index, text=all_texts[index],
                              masks=masks, error=error)

    reports = []
    for index, text in enumerate(all_texts):
        if index in errors:
            reports.append(report({"path": str(tree.path), "index": index, "text": text, "ok": False,
                                   "error": {"message": errors[index], "path": None}}, index, (), errors[index]))
            continue
        masks = [{"position": mask.position, "predictions": [p.as_dict() for p in mask.predictions]}
                 for mask in results[index]]
        reports.append(report({**fields, "ok": True, "index": index, "text": text, "masks": masks, "problems": [],
                               "notes": list(notes)}, index, tuple(results[index]), None))
    return reports[0] if isinstance(texts, str) else tuple(reports)


def _model(runtime: str, tree: Any, numerics: Any, on_tensor: Callable[[int], None] | None) -> Any:
    """The NumPy or the torch runtime's model of `tree`."""
    if runtime == "torch":
        from ..runtime.torch_bert import TorchBert  # torch is imported only when asked for
        return TorchBert(tree, numerics, on_tensor=on_tensor)
    from ..runtime.numpy_bert import NumpyBert
    return NumpyBert(tree, numerics, on_tensor=on_tensor)
