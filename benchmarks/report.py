"""The benchmark tables: rows as measured, rendered as Markdown (printed, and written to
`benchmarks/RESULTS.md` for the README). Numbers come only from `Measurement`s, never by hand."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .measure import Measurement

MIB = 2**20
#: Issue 17's goals: reference time / bertconv time at least this much.
AUDIT_GOAL = 30.0
#: Plain `verify` (the MLM head's presence, tying and trained-ness, from headers and the head's
#: own small tensors) against loading the model with transformers to learn the same.
VERIFY_GOAL = 25.0
CONVERT_GOAL = 5.0
FILL_MASK_GOAL = 3.0
#: Issue 17: a header-only command within this factor of a bare `python -c pass`.
STARTUP_GOAL = 3.0
#: bertconv's BERT-large conversions within this factor of `cp` of the same bytes.
CP_GOAL = 3.0
#: Issue 31: every conversion within this factor of `cp` + `sync` of the bytes it writes (bertconv
#: fsyncs its output, so that is the physical limit of a durable conversion).
SYNC_GOAL = 1.5
#: Issue 8: peak RSS of a conversion at most the largest tensor plus this.
RSS_HEADROOM = 150 * MIB


@dataclass
class Row:
    """One tool on one task. A reference row names the bertconv row it is compared with."""

    task: str
    tool: str
    measurement: Measurement | None
    bertconv: Row | None = None  # set on reference rows
    goal: float | None = None  # reference / bertconv must be >= goal
    note: str = ""
    #: A goal that is not a ratio (a bound on time or memory), stated, and whether it held.
    check: str = ""
    passed: bool | None = None
    #: What a FAIL comes from (printed on FAIL only).
    why: str = ""

    @property
    def verdict(self) -> str:
        """The goal and PASS or FAIL, or "" for a row without a goal."""
        if self.check and self.passed is not None:
            return f"{self.check}: {'PASS' if self.passed else 'FAIL'}"
        if self.goal is None or self.ratio is None:
            return ""
        return f"≥{self.goal:g}×: {'PASS' if self.ratio >= self.goal else 'FAIL'}"

    @property
    def failed(self) -> bool:
        return self.verdict.endswith("FAIL")

    @property
    def ratio(self) -> float | None:
        """reference time / bertconv time (> 1: bertconv is faster)."""
        if self.bertconv is None or self.measurement is None or self.bertconv.measurement is None:
            return None
        return self.measurement.median_s / self.bertconv.measurement.median_s


@dataclass
class PairRow:
    """A bertconv conversion between two formats, with its bounded-memory check."""

    source: str
    target: str
    file_bytes: int
    largest_tensor_bytes: int
    measurement: Measurement
    cp: Measurement | None = None  # `cp` of the source's bytes, for the speed-of-copy check
    cp_sync: Measurement | None = None  # `cp` + `sync` of the output's bytes (bertconv fsyncs)
    identical: str = ""  # output byte-identical to what the target format's own library wrote

    @property
    def rss_limit(self) -> int:
        return self.largest_tensor_bytes + RSS_HEADROOM

    @property
    def rss_ok(self) -> bool:
        return self.measurement.peak_rss_bytes <= self.rss_limit

    @property
    def times_cp(self) -> float | None:
        return None if self.cp is None else self.measurement.median_s / self.cp.median_s

    @property
    def times_cp_sync(self) -> float | None:
        return None if self.cp_sync is None else self.measurement.median_s / self.cp_sync.median_s


@dataclass
class AuditReadRow:
    """How much of a checkpoint `bertconv audit` pulled in, measured from a cold page cache."""

    kind: str
    file_bytes: int
    resident_after: int  # bytes of the checkpoint's files in the page cache after the audit
    measurement: Measurement

    @property
    def ok(self) -> bool:
        # Headers and indexes are read; a few readahead windows around them are fine, tensor
        # data is not: allow 1% of the file or 2 MiB, whichever is larger.
        return self.resident_after <= max(2 * MIB, self.file_bytes // 100)


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list)
    audit_reads: list[AuditReadRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Markdown printed after the tables (e.g. the time-per-GB table).
    extra: list[str] = field(default_factory=list)

    def pair_runs(self) -> list[int]:
        """The run counts of the pair rows' medians, in order (one count when all ran alike)."""
        return sorted({p.measurement.reps for p in self.pairs})


# --- machine ---------------------------------------------------------------------------------

PACKAGES = ("bertconv", "numpy", "safetensors", "torch", "transformers", "tensorflow-cpu", "tensorflow", "tf-keras",
            "bert4keras", "h5py", "google-crc32c")


def machine() -> list[tuple[str, str]]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        memory = f"{kib / 2**20:.1f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("CPU", f"{cpu}, {os.cpu_count()} cores"),
        ("memory", memory),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("versions", ", ".join(versions)),
        ("load average when the table was printed (1/5/15 min)", load),
    ]


# --- rendering -------------------------------------------------------------------------------

def _s(m: Measurement | None) -> str:
    """The median, with a dagger when some runs started while other processes used the CPUs."""
    if m is None:
        return "-"
    return f"{m.median_s:.2f}" + ("†" if m.busy_runs else "")


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.0f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _note(row: Row) -> str:
    parts = [row.note] + ([row.why] if row.failed and row.why else [])
    return "; ".join(p for p in parts if p)


def time_per_gb(sections: list[Section], tasks: tuple[tuple[str, str], ...]) -> list[str]:
    """The pair rows `tasks` ((source, target)) of every section as seconds per GB of input, and
    what that predicts for a 10 GB checkpoint (time grows with bytes: the rows show how closely)."""
    header = ["model", "input GB"] + [f"{s} → {t} s/GB" for s, t in tasks] + [f"{s} → {t}, 10 GB: s" for s, t in tasks]
    body = []
    for section in sections:
        by_task = {(p.source, p.target): p for p in section.pairs}
        found = [by_task.get(task) for task in tasks]
        if not any(found):
            continue
        gb = next(p for p in found if p).file_bytes / 1e9
        per_gb = [None if p is None else p.measurement.median_s / (p.file_bytes / 1e9) for p in found]
        body.append([section.title.split(":")[0], f"{gb:.2f}"] + ["-" if x is None else f"{x:.2f}" for x in per_gb]
                    + ["-" if x is None else f"{10 * x:.0f}" for x in per_gb])
    return _table(header, body) if body else []


def _runs_per_row(sections: list[Section], reps: int) -> str:
    """How many runs each median is of: `reps`, and the pair rows of a section measured otherwise."""
    other = [f"{', '.join(map(str, runs))} for {section.title.split(' (')[0]}'s pair rows" for section in sections
             if (runs := [n for n in section.pair_runs() if n != reps])]
    return ", ".join([f"medians of {reps} run(s) per row", *other])


def render(sections: list[Section], *, command: str, reps: int, extra: list[str] = ()) -> str:
    out = ["# bertconv benchmarks", "",
           f"Produced by `{command}` ({_runs_per_row(sections, reps)}, each a whole process; "
           "peak RSS is `ru_maxrss`, the largest over the runs). Ratios are reference time / bertconv time: "
           "above 1, bertconv is faster. † marks a median with runs that started while other processes "
           "kept the CPUs busy (after waiting for them to go idle).", ""]
    out += [f"- **{key}**: {value}" for key, value in machine()]
    out.append("")
    for section in sections:
        out += [f"## {section.title}", ""]
        if section.rows:
            body = []
            for row in section.rows:
                m = row.measurement
                ratio = "" if row.ratio is None else f"{row.ratio:.1f}×"
                body.append([row.task, row.tool, _s(m), ratio, _mib(m.peak_rss_bytes if m else None),
                             row.verdict, _note(row)])
            out += _table(["task", "tool", "median s", "ratio", "peak RSS MiB", "goal", "note"], body)
            out.append("")
        if section.pairs:
            body = []
            for p in section.pairs:
                m = p.measurement
                x_cp = "" if p.times_cp is None else f"{p.times_cp:.1f}×"
                x_sync = "" if p.times_cp_sync is None else f"{p.times_cp_sync:.1f}×"
                cp_verdict = "" if p.times_cp is None else ("PASS" if p.times_cp <= CP_GOAL else "FAIL")
                sync_verdict = "" if p.times_cp_sync is None else ("PASS" if p.times_cp_sync <= SYNC_GOAL else "FAIL")
                body.append([f"{p.source} → {p.target}", _mib(p.file_bytes), _mib(p.largest_tensor_bytes),
                             _s(m), x_cp, cp_verdict, _s(p.cp_sync), x_sync, sync_verdict, _mib(m.peak_rss_bytes),
                             _mib(p.rss_limit), "PASS" if p.rss_ok else "FAIL", p.identical or "-"])
            out += _table(["bertconv convert", "input MiB", "largest tensor MiB", "median s", "× cp",
                           f"≤{CP_GOAL:g}× cp", "cp + sync of the output's bytes (taking turns with it), s", "× (cp + sync)",
                           f"≤{SYNC_GOAL:g}× (cp + sync)", "peak RSS MiB", "RSS limit MiB", "RSS ≤ limit",
                           "output = library's bytes"], body)
            out.append("")
        if section.audit_reads:
            body = []
            for a in section.audit_reads:
                io = a.measurement.samples[0].io
                body.append([a.kind, _mib(a.file_bytes), f"{a.resident_after / 1024:,.0f}",
                             f"{io.get('rchar', 0) / 1024:,.0f}", f"{io.get('read_bytes', 0) / 1024:,.0f}",
                             _s(a.measurement), "PASS" if a.ok else "FAIL"])
            out += _table(["bertconv audit (cold cache)", "checkpoint MiB", "checkpoint KiB cached after",
                           "process rchar KiB", "process read_bytes KiB", "s", "reads no tensor data"], body)
            out.append("")
        if section.extra:
            out += [*section.extra, ""]
        out += [f"- {note}" for note in section.notes]
        if section.notes:
            out.append("")
    out += list(extra)
    return "\n".join(out).rstrip() + "\n"

