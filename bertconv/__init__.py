"""bertconv: convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them.

    import bertconv
    bertconv.verify("path/to/checkpoint", deep=True).ok       # any format; each command is a function
    bertconv.convert("bert_model.ckpt", "out", to="hf")        # returning a typed report (docs/api.md)
    tree = bertconv.load("path/to/checkpoint")                 # a canonical ParameterTree (headers only)
"""

from __future__ import annotations

from .version import __version__

#: typing.TYPE_CHECKING without importing typing (2 ms of `import bertconv`); type checkers read
#: any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:  # `X as X`: exported, to a type checker (its strict mode reads no star in __all__)
    from .api.audit import AuditReport as AuditReport, Counts as Counts, audit as audit
    from .api.convert import ConversionReport as ConversionReport, convert as convert, save as save
    from .api.diff import DiffReport as DiffReport, diff as diff
    from .api.fill_mask import FillMaskReport as FillMaskReport, fill_mask as fill_mask
    from .api.inspect import InspectReport as InspectReport, inspect as inspect
    from .api.report import Checkpoint as Checkpoint, Report as Report, load as load
    from .api.verify import VerifyReport as VerifyReport, verify as verify
    from .errors import BadInput as BadInput, BertconvError as BertconvError, CheckFailed as CheckFailed
    from typing import Any

#: What `bertconv` exports -> the module that defines it, imported when the name is first asked for:
#: `bertconv.cli` starts (and installs its signal handlers) before the formats load, and `audit`
#: does not wait for what `fill_mask` imports.
EXPORTS = {
    "load": "api.report", "Report": "api.report", "Checkpoint": "api.report",
    "inspect": "api.inspect", "InspectReport": "api.inspect",
    "audit": "api.audit", "AuditReport": "api.audit", "Counts": "api.audit",
    "verify": "api.verify", "VerifyReport": "api.verify",
    "diff": "api.diff", "DiffReport": "api.diff",
    "convert": "api.convert", "save": "api.convert", "ConversionReport": "api.convert",
    "fill_mask": "api.fill_mask", "FillMaskReport": "api.fill_mask",
    "BertconvError": "errors", "BadInput": "errors", "CheckFailed": "errors",
}

__all__ = ["__version__", *EXPORTS]


def __getattr__(name: str) -> Any:
    from .lazy import lazy_attribute  # here, not at the top: `import bertconv` loads .version alone

    return lazy_attribute(__name__, EXPORTS, name)
