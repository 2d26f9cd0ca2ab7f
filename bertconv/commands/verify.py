"""`bertconv verify PATH`: is the MLM head there, is the decoder tied, is the file sound?"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..api.verify import verify
from ..checks import trained
from .arguments import Toggle, json_flag, option
from .common import (ACCEPT_LOSS, BATCH_OPTIONS, CHECKPOINT_OPTIONS, CHECKPOINT_PATHS, byte_progress, finish, human,
                     load, stdout)

#: Colours of the head, tying and training verdicts in the human report.
VERDICT_STYLE = {"complete": "green", "tied": "green", "partial": "red", "missing": "red",
                 "untied": "yellow", "n/a": "dim", "trained": "green", "untrained": "red"}


def _styled(word: str) -> str:
    return f"[{VERDICT_STYLE.get(word, 'default')}]{word}[/]"


def _head_line(report: dict) -> str:
    line = f"MLM head:     {_styled(report['mlm_head'])}"
    if report["missing"]:
        line += f" (missing {', '.join(report['missing'])})"
    return line


def _consistency_line(report: dict) -> str:
    audit = report["audit"]
    if report["consistency"]:
        return f"consistency:  [red]{len(report['consistency'])} problem(s)[/]"
    return (f"consistency:  [green]ok[/] (shapes agree with the config; {human(audit['parameters'])} "
            f"parameters, as the closed form gives)")


def _trained_line(report: dict) -> str:
    """Whether the head is trained, and on what evidence."""
    judged = report["mlm_trained"]
    line = f"trained:      {_styled(judged['verdict'])}"
    signs = [trained.SIGNS_BY_KEY[key].describes for key in judged["signs"]]
    probe = judged["probe"]
    reasons = []
    if signs:
        reasons.append(", ".join(signs))
    elif "signs" in judged["evidence"]:
        none_seen = "no initializer values in the head"
        reasons.append(none_seen if probe else f"signs only: {none_seen}")
    if probe is not None:
        gain = probe["gain"] if isinstance(probe["gain"], str) else f"{probe['gain']:+.2f}"
        nll = probe["nll"] if isinstance(probe["nll"], str) else f"{probe['nll']:.2f}"
        reasons.append(f"context gain {gain} nats on a {probe['positions']}-token sample it wrote itself "
                       f"(trained: {probe['threshold_gain']:+.2f} or more): NLL {nll} against the sample's token "
                       f"entropy {probe['entropy']:.2f}")
    elif judged["verdict"] == trained.NOT_JUDGED:
        reasons.append(judged["evidence"])
    else:
        reasons.append(f"probe not run: {judged['probe_not_run']}")
    return line + (f" ({'; '.join(reasons)})" if reasons else "")


def _deep_line(report: dict) -> str:
    if report["deep"] is None:
        return ("deep checks:  not run (--deep reads every tensor: finite values, checksums, zeroed heads; "
                "and runs the MLM probe)")
    deep = report["deep"]
    return f"deep checks:  read {deep['tensors']} tensors, {human(deep['values'])} values"


def _rtd_lines(rtd: dict) -> list[str]:
    """An ELECTRA discriminator's head (replaced-token detection) and whether it is trained."""
    head = f"RTD head:     {_styled(rtd['head'])} (replaced-token detection, the discriminator's head)"
    if rtd["missing"]:
        head += f" (missing {', '.join(rtd['missing'])})"
    judged = rtd["trained"]
    signs = [trained.SIGNS_BY_KEY[key].describes for key in judged["signs"]]
    why = ", ".join(signs) if signs else ("signs: no initializer values in the head; no probe applies"
                                          if judged["evidence"] == "signs" else judged["evidence"])
    return [head, f"trained:      {_styled(judged['verdict'])} ({why})",
            "MLM head:     [dim]n/a[/] (not a masked LM: no decoder, no tying, no MLM verdict)"]


def print_report(report: dict) -> None:
    """The short human report: head, tying, consistency, deep, notes, problems, verdict."""
    stdout.print(f"[bold]{report['path']}[/]  format [cyan]{report['format']}[/]")
    if report.get("rtd") is not None:
        for line in _rtd_lines(report["rtd"]):
            stdout.print(line)
    else:
        stdout.print(_head_line(report))
        stdout.print(f"tying:        {_styled(report['tying'])} ({report['tying_detail']})")
        stdout.print(_trained_line(report))
    stdout.print(_consistency_line(report))
    stdout.print(_deep_line(report))
    for copy in report.get("copies", []):
        verdict = "[green]agrees[/]" if copy["agree"] else "[red]disagrees[/]"
        stdout.print(f"copy:         {copy['path']} {verdict} ({copy['compared']} compared)")
    for note in report["notes"]:
        stdout.print(f"note: {note}")
    for problem in report["problems"]:
        stdout.print(f"[red]problem:[/] {problem}")
    if report["ok"]:
        stdout.print("[green]verify ok[/]")
    else:
        stdout.print(f"[red]verify FAILED[/] ({len(report['problems'])} problem(s))")


ARGUMENTS = (
    CHECKPOINT_PATHS,
    *CHECKPOINT_OPTIONS,
    ACCEPT_LOSS,
    *BATCH_OPTIONS,
    option("--deep", action="store_true",
           help="Read every tensor once (streaming): finite values, checksums, LayerNorm gammas and heads not all "
                "zero."),
    option("--allow-missing-mlm", action="store_true",
           help="Accept a checkpoint without an MLM head (an encoder-only file verified on purpose)."),
    option("--allow-untrained-mlm", action="store_true",
           help="Accept an MLM head that is not trained (initializer values, or failing the probe): reported as a "
                "note."),
    option("--probe", "--no-probe", action=Toggle,
           help="Have the MLM head write a small seeded sample and check that it is far surer of it than the "
                "sample's token frequencies allow, as a trained head is (default: with --deep)."),
    option("--runtime", choices=trained.RUNTIMES, default="numpy",
           help="Runtime of the probe: NumPy, or torch (an optional extra) (default: %(default)s)."),
    option("--headers-only", action="store_true",
           help="Verify the headers alone: absent or short data files (an index published without its data) are "
                "noted, not failed."),
    json_flag("Print one JSON object (several checkpoints: one per line)."),
    option("--quiet", "-q", action="store_true", help="No progress bar for --deep."),
)


def command(paths: list[Path], config_path: Path | None, num_heads: int | None, model: str | None,
            revision: str | None, recursive: bool, jobs: int | None, deep: bool, allow_missing_mlm: bool,
            allow_untrained_mlm: bool, probe: bool | None, runtime: str, headers_only: bool, accept_loss: list[str],
            as_json: bool, quiet: bool) -> None:
    """Check that the MLM head is present, trained and its decoder tied, and that shapes agree with the config.

    Several PATHs (or --recursive) print one row per checkpoint; the exit status is the worst.

    Exit status: 0 ok, 1 a check failed, 2 the input cannot be read.
    """
    checks = dict(deep=deep, allow_missing_mlm=allow_missing_mlm, allow_untrained_mlm=allow_untrained_mlm,
                  probe=probe, runtime=runtime, headers_only=headers_only, accept_loss=tuple(accept_loss))
    if len(paths) > 1 or recursive:
        from . import batch  # a run over one checkpoint does without

        batch.run("verify", batch.expand(paths, recursive), partial(verify, **checks),
                  dict(config_path=config_path, num_heads=num_heads, model=model, revision=revision),
                  jobs=jobs, as_json=as_json)
        return
    tree = load(paths[0], config_path, num_heads, model, revision)
    work = sum(p.tensor.nbytes for p in tree) * (1 + 2 * len(tree.copies)) if deep else 0
    with byte_progress(f"reading {tree.path.name}", work, quiet) as advance:
        report = verify(tree, **checks, on_tensor=advance)
    finish(report, as_json, print_report)
