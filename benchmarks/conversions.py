"""The rows of issue 9 (and the bounded-memory figures of issue 8): bertconv next to the tools a
user would use instead, on the same inputs, in the same run, each as a whole process.

Per size (`base`, and `large` unless --quick):
  - audit: `bertconv audit` vs transformers `from_pretrained` + `num_parameters()` (safetensors,
    .bin), vs TensorFlow `tf.train.load_checkpoint` listing shapes (TF checkpoint);
  - convert HF -> HF, HF -> TF, .bin -> HF, TF -> HF, bert4keras h5 -> HF, bert4keras
    object-based pre-training checkpoint -> TF (issue 10), each vs the reference script in
    `benchmarks/reference/`;
  - physical limits: `cp` of the same bytes (and `cp` + `sync`, since bertconv fsyncs what it
    writes), reading the file once (`cat > /dev/null`);
  - every pair of formats bertconv reads and writes: time, x `cp`, peak RSS against the largest
    tensor + 150 MiB;
  - `bertconv audit` from a cold page cache: how much of the checkpoint it pulled in.

The pair and cold-audit rows include tf_model.h5 and flax_model.msgpack (issue 15), read from
inputs bertconv wrote itself (see benchmarks/inputs.py); TF2 Model Garden checkpoints are not
measured (building one needs the TF2 venv).

Runtime rows come from `benchmarks/runtime.py` when it exists (another issue's benchmark): it is
run as `python -m benchmarks.runtime [--quick] [--reps N]` and its stdout (Markdown) is appended.
"""

from __future__ import annotations

import filecmp
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import inputs
from .inputs import bert_names
from .measure import (CommandFailed, Job, Measurement, evict, measure_alternating, remove, resident_bytes, run_once,
                      warm)
from .report import (AUDIT_GOAL, CONVERT_GOAL, FILL_MASK_GOAL, MIB, RSS_HEADROOM, STARTUP_GOAL, VERIFY_GOAL,
                     AuditReadRow, PairRow, Row, Section, time_per_gb)

ROOT = inputs.ROOT
REFERENCE = inputs.REFERENCE
TITLES = {"base": "bert-base (L=12, H=768, V=30522, fp32)", "large": "BERT-large (L=24, H=1024, V=30522, fp32)",
          "xlmr": "large vocabulary, XLM-R size (L=12, H=768, V=250002, fp32)", "tiny": "tiny",
          "xlm-roberta": "XLM-RoBERTa-base, from tf_model.h5 and flax_model.msgpack (L=12, H=768, V=250002, fp32)"}
#: The conversions the time-per-GB table follows across sizes.
PER_GB_TASKS = (("hf-safetensors", "hf"), ("hf-safetensors", "tf"), ("tf", "hf"))
#: Why rows fail, where the reason is known (printed on FAIL rows only).
WHY = {
    "startup": "imports (argparse, json, the canonical tree, the format registry, the container's reader; no "
               "typing, no dataclass compiled), then the header parsed in pure Python (a TF index's entries, a "
               "msgpack file's maps) and its names matched against each family's table",
    "startup-hdf5": "bertconv's own reader of HDF5 metadata (no h5py, no NumPy) parses every object header in "
                    "pure Python, and the Keras formats' modules are imported and asked (bert4keras, keras-bert, "
                    "bert-for-tf2, tf_model.h5, keras-hub)",
    "startup-pickle": "bertconv's own unpickler, which runs no pickle code, reads data.pkl in pure Python, "
                      "after zipfile's import and its reading of the archive's directory",
    "audit": "Python start-up and imports are most of bertconv's time (see the python -c pass row)",
    "convert": "bertconv is bounded by copying the bytes once and fsyncing them (see cp + sync); the reference "
               "is fast where it mmaps and writes without fsync",
    "fill-mask": "both run the same encoder: start-up is most of a short text's time, the encoder's arithmetic "
                 "most of a long one's",
    "diff": "diff reads both checkpoints (twice the bytes of a conversion) and compares every value",
    "rss": "peak RSS above the largest tensor + 150 MiB",
}
#: The input kinds read through h5py.
HDF5_KINDS = ("bert4keras", "hf-tf", "keras-hub")
#: bertconv --to target -> (input kind it is read back as, whether the output is a single file)
TARGETS = {"hf": ("hf-safetensors", False), "tf": ("tf", False), "bert4keras": ("bert4keras", True),
           "hf-tf": ("hf-tf", False), "hf-flax": ("hf-flax", False), "keras-hub": ("keras-hub", False)}


def bertconv_command() -> list[str]:
    """The `bertconv` console script users run, beside this Python."""
    script = Path(sys.executable).parent / "bertconv"
    return [str(script)] if script.exists() else [sys.executable, "-m", "bertconv.cli"]


def reference(script: str, *args) -> list[str]:
    return [sys.executable, str(REFERENCE / script), *map(str, args)]


def available_targets() -> list[str]:
    """`convert --to` targets bertconv has now (bert4keras arrives with its own issue)."""
    from bertconv import formats

    return [t for t in TARGETS if t in formats.TARGETS]


def written_by_bertconv() -> list[str]:
    """The input kinds bertconv writes itself (issue 15's tf_model.h5 and flax_model.msgpack, a
    keras-hub preset), when it has the `--to` target: they join the pair and cold-audit rows."""
    from bertconv import formats

    return [kind for kind in ("hf-tf", "hf-flax", "keras-hub") if kind in formats.TARGETS]


def bert4keras_supported() -> bool:
    from bertconv import formats

    return any("bert4keras" in name for f in formats.FORMATS for name in f.names)


@dataclass(frozen=True)
class Command:
    """A command line to measure: `output` is removed before each run (and looked at by
    `check`, which says how it compares, see `Runner.checked`); an exit status outside
    `exit_codes` is a failure."""

    argv: list[str]
    output: Path | None = None
    stdout: str | None = None
    check: Callable[[Path], str] | None = None
    exit_codes: tuple[int, ...] = (0,)


#: A reference tool's row: its name, command line, goal (None: no goal) and output (removed between runs).
Reference = tuple[str, list[str], float | None, Path | None]


@dataclass
class Runner:
    """Measures commands, each once per distinct command line (rows that share a command share
    its measurement), printing progress to stderr."""

    reps: int
    out_dir: Path
    log: Callable[[str], None]
    idle_wait: float = 0  # seconds each run may wait for an idle machine
    untimed_first_run: bool = True  # each command run once, untimed, before its timed runs (`_first_run`)

    def __post_init__(self):
        self._cache: dict[tuple, list[Measurement | None]] = {}
        self._checks: dict[tuple, str] = {}

    def checked(self, command: list[str]) -> str:
        return self._checks.get(tuple(map(str, command)), "")

    def run(self, command: list[str], *, output: Path | None = None, env: dict | None = None,
            stdout: str | None = None, check: Callable[[Path], str] | None = None,
            exit_codes: tuple[int, ...] = (0,), reps: int | None = None) -> Measurement | None:
        """Measure `command` `reps` times (default: the runner's); `output` is removed before each
        run and after the last, once `check(output)` (if given) has looked at it (see `checked`).
        An exit status outside `exit_codes` is a failure."""
        return self.run_alternating([Command(command, output, stdout, check, exit_codes)], env=env, reps=reps)[0]

    def run_alternating(self, commands: list[Command], *, env: dict | None = None,
                        reps: int | None = None) -> list[Measurement | None]:
        """Measure `commands` taking turns run by run (see `measure_alternating`): for rows whose
        goal is a ratio between them. A command that fails is None, and the others are measured."""
        reps = reps or self.reps
        key = (*(tuple(map(str, c.argv)) for c in commands), f"reps={reps}")
        if key in self._cache:
            return self._cache[key]
        env = env or inputs.oracle_env()
        labels = [""] if len(commands) == 1 else [f"[{n}] " for n in range(1, len(commands) + 1)]
        for label, c in zip(labels, commands):
            self.log(f"  {label}" + " ".join(_short(str(a)) for a in c.argv))
        measured: list[Measurement | None] = [None] * len(commands)
        try:
            # One untimed run of each first: it fills the bytecode cache and the page cache of the
            # libraries the command imports, as any second use of a tool finds them.
            working = [i for i, c in enumerate(commands) if not self.untimed_first_run or self._first_run(c, env)]
            jobs = [Job(commands[i].argv, _before_each_run(commands[i].argv, commands[i].output, self.out_dir),
                        commands[i].stdout, check=False) for i in working]  # exit codes: checked below
            for i, m in zip(working, measure_alternating(jobs, reps=reps, env=env, cwd=ROOT, idle_wait=self.idle_wait)):
                failed = [s.exit_code for s in m.samples if s.exit_code not in commands[i].exit_codes]
                if failed:
                    self.log(f"    FAILED: {' '.join(map(str, commands[i].argv))} exited {failed[0]}")
                    continue
                measured[i] = m
                if commands[i].check is not None:
                    self._checks[tuple(map(str, commands[i].argv))] = commands[i].check(commands[i].output)
        except CommandFailed as exc:
            self.log(f"    FAILED: {exc}")
        finally:
            for c in commands:
                if c.output:
                    remove(c.output)()
        for label, m in zip(labels, measured):
            if m is not None:
                busy = f" ({m.busy_runs} of {m.reps} runs started on a busy machine)" if m.busy_runs else ""
                self.log(f"    {label}median {m.median_s:.2f} s, peak RSS {m.peak_rss_bytes / 2**20:.0f} MiB{busy}")
        self._cache[key] = measured
        return measured

    def _first_run(self, command: Command, env: dict) -> bool:
        """The untimed first run; False (logged) if it failed."""
        if command.output:
            remove(command.output)()
        try:
            first = run_once(command.argv, env=env, cwd=ROOT, stdout=command.stdout, check=command.exit_codes == (0,))
        except CommandFailed as exc:
            self.log(f"    FAILED: {exc}")
            return False
        if first.exit_code not in command.exit_codes:
            self.log(f"    FAILED: {' '.join(map(str, command.argv))} exited {first.exit_code}")
            return False
        return True

    def out(self, name: str) -> Path:
        return self.out_dir / name


def _before_each_run(command: list[str], output: Path | None, out_dir: Path) -> Callable[[], None]:
    """Untimed, before each run: remove the previous output, then read the command's inputs
    (`command_inputs`) so that they are in the page cache. Reading them once per section is not
    enough on a machine that reclaims idle page cache: on this one, a quarter of a file read
    20 s earlier had been evicted, three quarters after a minute, and a row runs after minutes
    of reference tools."""
    inputs_read = command_inputs(command, outputs=out_dir)

    def prepare() -> None:
        if output:
            remove(output)()
        warm(inputs_read)
    return prepare


def command_inputs(command: list[str], *, outputs: Path) -> list[Path]:
    """The bench input files a command names: a file, the files of a directory, or the index and
    data shards of a TF prefix (bert_model.ckpt), for arguments inside the bench directory and
    not inside `outputs` (where commands write)."""
    bench, outputs = inputs.bench_dir().resolve(), Path(outputs).resolve()
    found: list[Path] = []
    for argument in command[1:]:
        path = Path(argument) if Path(argument).is_absolute() else ROOT / argument
        where = path.resolve()
        if bench not in where.parents or where == outputs or outputs in where.parents:
            continue
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(f for f in path.iterdir() if f.is_file())
        elif Path(f"{path}.index").is_file():
            found += sorted(path.parent.glob(f"{path.name}.*"))
    return found


def _short(text: str) -> str:
    for base in (str(inputs.bench_dir()), str(ROOT)):
        text = text.replace(base + "/", "")
    return text


def file_bytes(size: str, kind: str) -> int:
    return sum(f.stat().st_size for f in inputs.data_files(size, kind))


def largest_tensor_bytes(size: str) -> int:
    shapes = bert_names.google_shapes(inputs.CONFIGS[size]).values()
    return max(math.prod(shape) for shape in shapes) * 4


def convert_command(size: str, kind: str, target: str, destination: Path) -> list[str]:
    return [*bertconv_command(), "convert", inputs.entry_path(size, kind), destination, "--to", target, "--quiet",
            *inputs.accept_loss_flags(kind, target)]


def destination(runner: Runner, kind: str, target: str) -> Path:
    name = f"{kind}-to-{target}"
    return runner.out(name + ".h5" if TARGETS[target][1] else name)


def prepare_inputs(size: str, kinds: list[str], log: Callable[[str], None]) -> str:
    """Build the inputs of `kinds` at `size` that the cache lacks and read them once into the page
    cache; the section's title, which gives the size of what was built."""
    for kind in kinds:
        inputs.ensure(size, kind, log=log)
    warm([f for kind in kinds for f in inputs.data_files(size, kind)])
    return f"{TITLES[size]}: {file_bytes(size, 'hf-safetensors') / 2**20:,.0f} MiB in model.safetensors"


def size_section(size: str, runner: Runner, *, with_b4k: bool, with_keras_object: bool) -> Section:
    """Every row of issue 9 for one model size."""
    kinds = ["hf-safetensors", "hf-bin", "tf"] + (["bert4keras"] if with_b4k else []) + written_by_bertconv()
    section = Section(prepare_inputs(size, kinds, runner.log))
    bc = bertconv_command()

    def pair(task: str, bertconv_cmd: list[str], output: Path | None, refs: list[Reference]) -> None:
        against_references(section, runner, task, Command(bertconv_cmd, output, check=check_for(size, bertconv_cmd)),
                           refs)

    # audit
    for kind, label in (("hf-safetensors", "model.safetensors"), ("hf-bin", "pytorch_model.bin")):
        pair(f"audit {label}", [*bc, "audit", inputs.entry_path(size, kind)], None,
             [("transformers from_pretrained + num_parameters", reference("hf_load_count.py", inputs.input_dir(size, kind)),
               AUDIT_GOAL, None)])
    pair("audit TF checkpoint", [*bc, "audit", inputs.entry_path(size, "tf")], None,
         [("TensorFlow load_checkpoint + shapes", reference("tf_count.py", inputs.entry_path(size, "tf")), None, None)])
    startup_row(size, section, runner, kinds)
    pair("verify model.safetensors (MLM head: present, tied, trained)",
         [*bc, "verify", inputs.entry_path(size, "hf-safetensors")], None,
         [("transformers from_pretrained(output_loading_info) + tie and initializer checks",
           reference("hf_verify_head.py", inputs.input_dir(size, "hf-safetensors")), VERIFY_GOAL, None)])

    # conversions with a reference
    resave = runner.out("ref-hf")
    pair("convert HF → HF (model.safetensors)", convert_command(size, "hf-safetensors", "hf", destination(runner, "hf-safetensors", "hf")),
         destination(runner, "hf-safetensors", "hf"),
         [("transformers from_pretrained + save_pretrained",
           reference("hf_resave.py", inputs.input_dir(size, "hf-safetensors"), resave), CONVERT_GOAL, resave)])
    pair("convert HF → HF (pytorch_model.bin)", convert_command(size, "hf-bin", "hf", destination(runner, "hf-bin", "hf")),
         destination(runner, "hf-bin", "hf"),
         [("transformers from_pretrained + save_pretrained",
           reference("hf_resave.py", inputs.input_dir(size, "hf-bin"), resave), CONVERT_GOAL, resave)])
    ref_tf = runner.out("ref-tf")
    pair("convert HF → TF", convert_command(size, "hf-safetensors", "tf", destination(runner, "hf-safetensors", "tf")),
         destination(runner, "hf-safetensors", "tf"),
         [("transformers + TensorFlow SaveV2 (Google names)",
           reference("hf_to_tf.py", inputs.input_dir(size, "hf-safetensors"), ref_tf), CONVERT_GOAL, ref_tf)])
    pair("convert TF → HF", convert_command(size, "tf", "hf", destination(runner, "tf", "hf")), destination(runner, "tf", "hf"),
         [("TensorFlow load_checkpoint + safetensors save_file",
           reference("tf_to_hf.py", inputs.entry_path(size, "tf"), resave), CONVERT_GOAL, resave)])
    if with_b4k:
        h5 = inputs.entry_path(size, "bert4keras")
        pair("convert bert4keras h5 → HF", convert_command(size, "bert4keras", "hf", destination(runner, "bert4keras", "hf")),
             destination(runner, "bert4keras", "hf"),
             [("bert4keras build_transformer_model + load_weights + export",
               reference("b4k_to_hf.py", h5, h5.parent / "bert_config.json", resave), CONVERT_GOAL, resave)])
    if with_keras_object:
        keras_object_rows(size, runner, section)
    diff_row(size, runner, section)
    if size == "base":
        fill_mask_rows(size, runner, section)

    # physical limits
    st = inputs.entry_path(size, "hf-safetensors")
    cp_out = runner.out("cp.bin")
    cp = runner.run(["cp", st, cp_out], output=cp_out)
    anchor = next(r for r in section.rows if r.task.startswith("convert HF → HF (model"))
    section.rows.append(Row("copy model.safetensors", "cp", cp, bertconv=anchor,
                            note="physical limit; ratio vs bertconv HF → HF"))
    cp_sync = runner.run(["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", st, cp_out], output=cp_out)
    section.rows.append(Row("copy model.safetensors", "cp + sync", cp_sync, bertconv=anchor,
                            note="bertconv fsyncs its output before renaming it into place"))
    cat = runner.run(["cat", st], stdout=os.devnull)
    section.rows.append(Row("read model.safetensors once", "cat > /dev/null", cat, note="from the page cache"))
    section.notes.append("bertconv writes into a temporary sibling, fsyncs it and renames it into place (atomic and "
                         "durable); `cp` does not fsync, `cp + sync` does. Inputs are in the page cache for every "
                         "timed run (each run's input files are read just before it: this machine reclaims "
                         "idle page cache within a minute); outputs are removed and `sync` run between runs.")

    # every pair of formats, each against `cp` of its input and `cp` + `sync` of its output's bytes
    # (the input of the target's kind: every kind holds the same values), measured in this run
    targets = [t for t in available_targets() if t != "bert4keras" or with_b4k]
    for kind in kinds:
        cp_kind = cp if kind == "hf-safetensors" else _cp_measurement(size, kind, runner)
        for target in targets:
            dest = destination(runner, kind, target)
            command = convert_command(size, kind, target, dest)
            # the conversion and `cp` + `sync` of its output's bytes take turns: the disk's speed
            # drifts over minutes on this machine, and a limit measured earlier would carry the drift
            limit_kind = TARGETS[target][0]
            m, limit = runner.run_alternating([Command(command, dest, check=check_for(size, command)),
                                               _cp_command(size, limit_kind, runner, sync=True)],
                                              reps=pair_reps(size, kind, runner))
            if m is not None:
                section.pairs.append(PairRow(kind, target, file_bytes(size, kind), largest_tensor_bytes(size), m, cp_kind,
                                             cp_sync=limit, identical=runner.checked(command)))

    pair_runs = section.pair_runs()
    if pair_runs and pair_runs != [runner.reps]:
        section.notes.append(f"Each pair row of this size is the median of {' or '.join(map(str, pair_runs))} "
                             "runs of the conversion and as many of `cp` + `sync`, taking turns: a sub-second "
                             "conversion's margin to its line is about the disk's jitter.")
    if written_by_bertconv():
        section.notes.append(f"{', '.join(written_by_bertconv())} inputs were written by bertconv itself from the "
                             "hf-safetensors input; TF2 Model Garden checkpoints are not measured (building one "
                             "needs the TF2 venv).")

    # audit reads no tensor data
    for kind in kinds:
        section.audit_reads.append(audit_cold(size, kind, runner))
    warm([f for kind in kinds for f in inputs.data_files(size, kind)])
    return section


def against_references(section: Section, runner: Runner, task: str, mine: Command, refs: list[Reference], *,
                       why: str | None = None) -> Row:
    """bertconv's row for `task` and each reference's, held to its goal, all measured taking turns:
    this machine's speed drifts over minutes, and rows measured one after another carried the
    drift into their ratio (BERT-large's HF -> HF from a .bin took 1.70 s in its own row, 4.6x the
    reference's 7.81 s, and 1.27 s in its pair row minutes later; taking turns, 1.23 and 9.03 s).
    Returns bertconv's row. `why` explains a missed goal (default: the audit's or the conversion's)."""
    measured = runner.run_alternating([mine, *(Command(command, output) for _, command, _, output in refs)])
    row = Row(task, "bertconv", measured[0])
    section.rows.append(row)
    why = why or (WHY["audit"] if task.startswith(("audit", "verify")) else WHY["convert"])
    for (tool, _, goal, _), m in zip(refs, measured[1:]):
        section.rows.append(Row(task, tool, m, bertconv=row, goal=goal, why=why))
    return row


#: Runs of each side of a pair row (a conversion against `cp` + `sync` of its output) whose input
#: is under `SHORT_PAIR_BYTES`. At bert-base a conversion takes about 0.6 s against a line of 1.5x
#: 0.4 s, and the disk's jitter is as large as that margin: in one `make bench` run, hf-safetensors
#: -> hf (a plain copy) took 0.74 s in its pair row and 0.56 s in the section's own row, and
#: hf-safetensors -> hf-flax measured 0.80 s and 0.59 s minutes apart (medians of 9 and of 7), so
#: medians of 3 decided verdicts by chance. A run asked for one repetition (`--quick`: a look, no
#: verdicts to keep) gets one.
SHORT_PAIR_REPS = 7
SHORT_PAIR_BYTES = 1 << 30


def pair_reps(size: str, kind: str, runner: Runner) -> int:
    """Runs of each side of the pair rows converting `size`'s input of `kind` (see `SHORT_PAIR_REPS`)."""
    if runner.reps == 1 or file_bytes(size, kind) >= SHORT_PAIR_BYTES:
        return runner.reps
    return max(runner.reps, SHORT_PAIR_REPS)


#: Runs of each side of the start-up row: a header-only command takes tens of milliseconds, which
#: a few runs cannot resolve against the machine's jitter (and many cost about a second).
STARTUP_REPS = 21


#: What each input kind is called in the start-up rows.
STARTUP_LABELS = {"hf-safetensors": "model.safetensors", "hf-bin": "pytorch_model.bin", "tf": "TF checkpoint",
                  "bert4keras": "bert4keras h5", "hf-tf": "tf_model.h5", "hf-flax": "flax_model.msgpack",
                  "keras-hub": "keras-hub preset"}


def startup_row(size: str, section: Section, runner: Runner, kinds: list[str] = ("hf-safetensors",)) -> None:
    """Issues 17 and 31: `bertconv audit` and `bertconv inspect` of each input of `kinds` within
    3x of a bare interpreter, all taking turns, `STARTUP_REPS` runs each (medians)."""
    reps = max(runner.reps, STARTUP_REPS)
    measured = [(command, kind) for kind in kinds for command in ("audit", "inspect")]
    *headers, bare = runner.run_alternating([Command([*bertconv_command(), command, inputs.entry_path(size, kind)])
                                             for command, kind in measured]
                                            + [Command([sys.executable, "-c", "pass"])], reps=reps)
    for (command, kind), runs in zip(measured, headers):
        passed = None if bare is None or runs is None else runs.median_s <= STARTUP_GOAL * bare.median_s
        times = "" if passed is None else \
            (f"bertconv {command} = {runs.median_s / bare.median_s:.1f}× this "
             f"({runs.median_s * 1000:.0f} vs {bare.median_s * 1000:.0f} ms, medians of {reps} runs each, taking turns)")
        section.rows.append(Row(f"{command} {STARTUP_LABELS[kind]}", "python -c pass (interpreter start-up)", bare,
                                check=f"bertconv ≤ {STARTUP_GOAL:g}× this", passed=passed, note=times,
                                why=startup_why(kind)))


def startup_why(kind: str) -> str:
    """Why `audit` or `inspect` of an input of `kind` takes what it takes (printed on a FAIL)."""
    return WHY["startup-hdf5"] if kind in HDF5_KINDS else WHY["startup-pickle"] if kind == "hf-bin" else WHY["startup"]


def diff_row(size: str, runner: Runner, section: Section) -> None:
    """Issue 17: `bertconv diff` of the HF and TF inputs streams: no slower than the TF -> HF
    conversion it checks (the two taking turns), peak RSS within 2 x the largest tensor + 150 MiB."""
    # --json: the verdict is "not ok" when the two configs' hidden_act spellings differ (the bench's
    # TF config says "gelu", which Google's family reads as the tanh GELU), exit 1; the values are
    # compared all the same.
    command = [*bertconv_command(), "diff", inputs.entry_path(size, "hf-safetensors"), inputs.entry_path(size, "tf"),
               "--json"]
    output = destination(runner, "tf", "hf")
    m, convert = runner.run_alternating([Command(command, exit_codes=(0, 1)),
                                         Command(convert_command(size, "tf", "hf", output), output)])
    if m is None:
        return
    limit = 2 * largest_tensor_bytes(size) + RSS_HEADROOM
    rss_ok = m.peak_rss_bytes <= limit
    fast = convert is not None and m.median_s <= convert.median_s
    why = "; ".join(w for ok, w in ((fast, WHY["diff"]), (rss_ok, WHY["rss"].replace("the largest", "2 × the largest")))
                    if not ok)
    note = "" if convert is None else \
        f"{m.median_s / convert.median_s:.1f}× convert TF → HF ({convert.median_s:.2f} s, the two taking turns)"
    section.rows.append(Row("diff HF vs TF (bit-equal)", "bertconv", m, note=note,
                            check=f"≤ convert TF → HF s, RSS ≤ {_mib_text(limit)} MiB", passed=fast and rss_ok, why=why))


def _mib_text(n: int) -> str:
    return f"{n / MIB:,.0f}"


def fill_mask_rows(size: str, runner: Runner, section: Section) -> None:
    """Issue 17: `bertconv fill-mask` vs transformers' fill-mask pipeline, each a whole process,
    on the hf-safetensors input with a generated vocab.txt (random weights: the predictions are
    noise; the work is the same)."""
    directory = inputs.fill_mask_dir(size)
    text = inputs.FILL_MASK_TEXT
    weights = (directory / "model.safetensors").resolve()
    mine = against_references(
        section, runner, "fill-mask (one [MASK])",
        Command([*bertconv_command(), "fill-mask", weights, text, "--vocab", directory / "vocab.txt"]),
        [("transformers pipeline('fill-mask')", reference("fill_mask_pipeline.py", directory, text), FILL_MASK_GOAL,
          None)],
        why=WHY["fill-mask"])
    if mine.measurement is not None:
        rss = mine.measurement.peak_rss_bytes
        mine.note = (f"peak RSS {rss / weights.stat().st_size:.2f}× the {_mib_text(weights.stat().st_size)} MiB "
                     "weights file (mapped: pages shared with the page cache)")


def scale_section(size: str, runner: Runner) -> Section:
    """Issue 17's scale row: a large-vocabulary model (one 732 MiB embedding table) through audit,
    convert (HF -> HF, HF -> TF, TF -> HF) and diff, each against the memory bound."""
    kinds = ["hf-safetensors", "tf"]
    section = Section(prepare_inputs(size, kinds, runner.log))
    bc = bertconv_command()
    section.rows.append(Row("audit model.safetensors", "bertconv",
                            runner.run([*bc, "audit", inputs.entry_path(size, "hf-safetensors")])))
    startup_row(size, section, runner)
    for kind, target in (("hf-safetensors", "hf"), ("hf-safetensors", "tf"), ("tf", "hf")):
        dest = destination(runner, kind, target)
        command = convert_command(size, kind, target, dest)
        m = runner.run(command, output=dest)
        if m is not None:
            if (kind, target) == ("tf", "hf"):
                section.rows.append(Row("convert TF → HF", "bertconv", m))
            section.pairs.append(PairRow(kind, target, file_bytes(size, kind), largest_tensor_bytes(size), m,
                                         _cp_measurement(size, kind, runner), identical=""))
    diff_row(size, runner, section)
    section.audit_reads.append(audit_cold(size, "hf-safetensors", runner))
    warm([f for kind in kinds for f in inputs.data_files(size, kind)])
    return section


#: transformers 4.x with TensorFlow and Flax: what reads tf_model.h5 and flax_model.msgpack.
ORACLE_PYTHON = ROOT / ".cache" / "oracle-venv" / "bin" / "python"


def tf_flax_section(size: str, runner: Runner) -> Section:
    """Issue 27's row: an XLM-RoBERTa's tf_model.h5 and flax_model.msgpack (written by bertconv from the
    safetensors input) converted to model.safetensors, against transformers 4.57 loading the file
    into its PyTorch class and saving it (`reference/tf_flax_to_hf.py`, in the oracle
    environment), and against the memory bound."""
    kinds = ["hf-safetensors", "hf-tf", "hf-flax"]
    section = Section(prepare_inputs(size, kinds, runner.log))
    for kind, label in (("hf-tf", "convert TF (tf_model.h5) → HF"), ("hf-flax", "convert Flax (flax_model.msgpack) → HF")):
        dest = destination(runner, kind, "hf")
        command = convert_command(size, kind, "hf", dest)
        ref_out = runner.out("ref-hf")
        refs = [("transformers 4.57 load into its PyTorch class + save_pretrained",
                 [str(ORACLE_PYTHON), str(REFERENCE / "tf_flax_to_hf.py"), inputs.input_dir(size, kind), ref_out],
                 CONVERT_GOAL, ref_out)] if ORACLE_PYTHON.exists() else []
        mine = against_references(section, runner, label, Command(command, dest), refs)
        if mine.measurement is not None:
            section.pairs.append(PairRow(kind, "hf", file_bytes(size, kind), largest_tensor_bytes(size), mine.measurement,
                                         _cp_measurement(size, kind, runner), identical=""))
    if not ORACLE_PYTHON.exists():
        section.notes.append(f"no oracle environment at {ORACLE_PYTHON.parent.parent} (`make oracle`): the "
                             "transformers 4.57 rows are left out")
    section.notes.append("The tf_model.h5 and flax_model.msgpack inputs were written by bertconv from the "
                         "hf-safetensors input (XLMRobertaForMaskedLM's names).")
    warm([f for kind in kinds for f in inputs.data_files(size, kind)])
    return section


def check_for(size: str, command: list[str]) -> Callable[[Path], str] | None:
    """The output check of a `bertconv convert ... --to T` command (see `same_as_library`); none
    for one that accepts a loss (to or from a keras-hub preset, which has no next-sentence head):
    its output cannot be the library's file of every value."""
    if "convert" not in command or "--to" not in command or "--accept-loss" in command:
        return None
    target = command[command.index("--to") + 1]
    return lambda output: same_as_library(size, target, output)


def same_as_library(size: str, target: str, output: Path) -> str:
    """Whether bertconv's output is byte for byte the input the format's own library wrote from
    the same values ("yes"/"NO"), or "" where that is not expected (HDF5 files carry their own
    layout) or the input was written by bertconv itself (tf_model.h5, flax_model.msgpack)."""
    files = {"hf": ["model.safetensors"], "tf": ["bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"]}
    if target not in files:
        return ""
    library = inputs.input_dir(size, TARGETS[target][0])
    same = all(filecmp.cmp(output / name, library / name, shallow=False) for name in files[target])
    return "yes" if same else "NO"


def _cp_measurement(size: str, kind: str, runner: Runner, *, sync: bool = False) -> Measurement | None:
    """`cp` of a checkpoint's files into a new directory (then `sync` of the copies, if asked)."""
    command = _cp_command(size, kind, runner, sync=sync)
    return runner.run(command.argv, output=command.output)


def _cp_command(size: str, kind: str, runner: Runner, *, sync: bool = False) -> Command:
    """The command of `_cp_measurement`."""
    files = inputs.data_files(size, kind)
    out = runner.out(f"cp-{kind}")
    script = 'out="$1"; shift; mkdir "$out" && cp "$@" "$out"/' + (' && sync "$out"/*' if sync else "")
    return Command(["sh", "-c", script, "sh", out, *files], out)


def audit_cold(size: str, kind: str, runner: Runner) -> AuditReadRow:
    """`bertconv audit` once with the checkpoint evicted from the page cache: the bytes of it
    that are cached afterwards are what the audit (and the kernel's readahead) read."""
    files = inputs.data_files(size, kind)
    evict(files)
    sample = run_once([*bertconv_command(), "audit", inputs.entry_path(size, kind)], cwd=ROOT, env=inputs.oracle_env())
    resident = sum(resident_bytes(f) for f in files)
    runner.log(f"  cold audit of {kind}: {resident / 1024:.0f} KiB of {file_bytes(size, kind) / 2**20:.0f} MiB cached after")
    return AuditReadRow(kind, file_bytes(size, kind), resident,
                        Measurement(tuple(map(str, [*bertconv_command(), "audit"])), (sample,)))


def keras_object_rows(size: str, runner: Runner, section: Section) -> None:
    """Issue 10: a bert4keras pre-training checkpoint (object-based, with Adam state) to Google TF."""
    try:
        inputs.ensure(size, "keras-object", log=runner.log)
    except subprocess.CalledProcessError as exc:
        section.notes.append(f"keras object-based input could not be built ({exc}); issue 10 row skipped")
        return
    prefix = inputs.entry_path(size, "keras-object")
    probe = run_once([*bertconv_command(), "audit", prefix], cwd=ROOT, check=False, env=inputs.oracle_env())
    if probe.exit_code not in (0, 1):
        section.notes.append("bertconv does not read bert4keras object-based checkpoints yet "
                             f"(audit exit {probe.exit_code}); issue 10 row skipped")
        return
    warm(inputs.data_files(size, "keras-object"))
    dest, ref_out, config = runner.out("keras-object-to-tf"), runner.out("ref-keras-tf"), prefix.parent / "bert_config.json"
    against_references(
        section, runner, "convert bert4keras pre-training ckpt (object-based, Adam) → TF",
        Command([*convert_command(size, "keras-object", "tf", dest), "--config", config], dest),
        [("bert4keras + tf-keras restore + SaveV2 (workaround)", reference("keras_object_to_tf.py", prefix, config, ref_out),
          CONVERT_GOAL, ref_out)])


def runtime_section(reps: int, quick: bool, log) -> list[str]:
    """The runtime benchmark's Markdown, when `benchmarks/runtime.py` exists."""
    if not (Path(__file__).parent / "runtime.py").exists():
        return []
    log("runtime benchmark (benchmarks/runtime.py) ...")
    base = [sys.executable, "-m", "benchmarks.runtime"]
    for command in ([*base, *(["--quick"] if quick else []), "--reps", str(reps)], base):
        proc = subprocess.run(command, cwd=ROOT, env=inputs.oracle_env(), capture_output=True, text=True)
        if proc.returncode == 0:
            return ["## Runtime (benchmarks/runtime.py)", "", proc.stdout.strip(), ""]
        if proc.returncode != 2:  # 2: it does not take these options; try it bare
            break
    log(f"  runtime benchmark failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return ["## Runtime (benchmarks/runtime.py)", "", f"benchmarks/runtime.py failed (exit {proc.returncode}).", ""]


def run(sizes: list[str], reps: int, log, *, idle_wait: float = 0) -> list[Section]:
    with_b4k = bert4keras_supported() and "bert4keras" in available_targets()
    out_dir = inputs.bench_dir() / "out"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    runner = Runner(reps, out_dir, log, idle_wait)
    sections = []
    try:
        for size in sizes:
            log(f"== {TITLES[size]}")
            if size == "xlmr":
                sections.append(scale_section(size, runner))
                continue
            if size in inputs.ROBERTA_SIZES:
                sections.append(tf_flax_section(size, runner))
                continue
            section = size_section(size, runner, with_b4k=with_b4k, with_keras_object=with_b4k and size == "base")
            if not with_b4k:
                section.notes.append("bertconv has no bert4keras format yet: the bert4keras rows are left out")
            sections.append(section)
        per_gb = time_per_gb(sections, PER_GB_TASKS)
        if per_gb and len(sections) > 1:
            sections.append(Section("Time per GB (bertconv convert): predicting a bigger checkpoint", extra=[
                "Seconds per GB of input for each size, and the time that rate predicts for a 10 GB checkpoint "
                "(conversions stream tensor by tensor, so time follows bytes and memory follows the largest tensor).",
                "", *per_gb]))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return sections
