"""Smoke test of the benchmark harness on a few-KB fixture: the measuring helpers and the table
printer run and produce what the tables need. No timing is asserted."""

from __future__ import annotations

import json
import math
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import measure, report
from benchmarks.inputs import bert_names
from conftest import needs, requires

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "hf" / "pretraining"
BERTCONV = [sys.executable, "-m", "bertconv.cli"]


def test_run_once_reports_time_rss_and_io():
    sample = measure.run_once([*BERTCONV, "audit", FIXTURE / "model.safetensors"], cwd=ROOT)
    assert sample.exit_code == 0
    assert sample.wall_s > 0
    assert sample.maxrss_bytes > 1 << 20
    assert {"rchar", "read_bytes"} <= set(sample.io)


def test_failing_command_raises_with_its_stderr(tmp_path):
    with pytest.raises(measure.CommandFailed, match="does not exist"):
        measure.run_once([*BERTCONV, "audit", tmp_path / "absent"], cwd=ROOT)
    sample = measure.run_once([*BERTCONV, "audit", tmp_path / "absent"], cwd=ROOT, check=False)
    assert sample.exit_code == 2


def test_measure_repeats_and_cleans_the_output(tmp_path):
    out = tmp_path / "converted"
    [m] = measure.measure_alternating([measure.Job([*BERTCONV, "convert", FIXTURE, out, "--to", "hf", "--quiet"],
                                                   before_each=measure.remove(out))], reps=2, cwd=ROOT)
    assert m.reps == 2 and m.median_s > 0 and m.peak_rss_bytes > 0
    assert (out / "model.safetensors").exists()  # the last run's output, until the caller removes it
    measure.remove(out)()
    assert not out.exists()


def test_stdout_can_be_discarded(tmp_path):
    sample = measure.run_once(["cat", FIXTURE / "model.safetensors"], stdout="/dev/null")
    assert sample.exit_code == 0


def _filesystem_type(path: Path) -> str:
    """The type of the filesystem holding `path` (the longest mount point above it)."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    return max(((point, kind) for point, kind in mounts if str(path).startswith(point.rstrip("/") + "/")),
               key=lambda mount: len(mount[0]))[1]


def test_page_cache_helpers(tmp_path):
    path = tmp_path / "pages.bin"
    size = 40 * mmap.PAGESIZE + 123  # a partial last page
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())  # clean pages: eviction may drop them
    measure.warm([path])
    assert measure.resident_bytes(path) == size
    if _filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("the page cache is the storage on tmpfs: nothing to evict")
    measure.evict([path])
    assert measure.resident_bytes(path) == 0


def test_reference_names_match_a_transformers_file():
    """The benchmark's own Google <-> HF table agrees with a file transformers wrote."""
    safe_open = needs("safetensors").safe_open

    config = json.loads((FIXTURE / "config.json").read_text())
    with safe_open(FIXTURE / "model.safetensors", "np") as f:
        stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    ours = {}
    for name, shape in bert_names.google_shapes(config).items():
        hf, transpose = bert_names.google_to_hf(name)
        ours[hf] = tuple(reversed(shape)) if transpose else shape
        assert bert_names.hf_to_google(hf) == (name, transpose)
    assert ours == stored


@pytest.mark.parametrize("fixture, exit_code, says", [
    ("pretraining", 0, "MLM head missing: none; tied: True; initializer values: False"),
    ("bert_model", 1, "MLM head missing: ['cls.predictions"),
])
def test_verify_reference_reaches_bertconv_verify_verdict(fixture, exit_code, says):
    """The reference the verify row is timed against does the work `bertconv verify` does: it
    finds a missing head (and would pass the same checkpoints)."""
    needs("transformers")
    directory = ROOT / "fixtures" / "hf" / fixture
    reference = subprocess.run([sys.executable, ROOT / "benchmarks" / "reference" / "hf_verify_head.py", directory],
                               capture_output=True, text=True)
    assert (reference.returncode, says in reference.stdout) == (exit_code, True), reference.stdout + reference.stderr
    ours = subprocess.run([*BERTCONV, "verify", directory], capture_output=True, text=True, cwd=ROOT)
    assert ours.returncode == exit_code


def test_table_printer(tmp_path):
    def fake(seconds: float, rss_mib: float, io=None) -> measure.Measurement:
        sample = measure.Sample(seconds, int(rss_mib * report.MIB), 0, seconds, 0.0, io or {})
        return measure.Measurement(("x",), (sample, sample))

    ours = report.Row("audit model.safetensors", "bertconv", fake(0.25, 40))
    ref = report.Row("audit model.safetensors", "transformers", fake(8.0, 350), bertconv=ours, goal=report.AUDIT_GOAL)
    slow = report.Row("convert", "somebody", fake(1.0, 50), bertconv=ours, goal=report.CONVERT_GOAL)
    largest = 30522 * 1024 * 4
    pair_ok = report.PairRow("tf", "hf", 1_340_000_000, largest, fake(2.0, 200), cp=fake(1.0, 9), cp_sync=fake(1.6, 9),
                             identical="yes")
    pair_bad = report.PairRow("hf", "tf", 1_340_000_000, largest, fake(4.0, 400), cp=fake(1.0, 9))
    cold = report.AuditReadRow("hf-safetensors", 440_000_000, 600_000,
                               fake(0.3, 40, {"rchar": 7_000_000, "read_bytes": 600_000}))
    section = report.Section("tiny", [ours, ref, slow], [pair_ok, pair_bad], [cold], ["a note"])
    text = report.render([section], command="python -m benchmarks --quick", reps=2)

    bound = report.Row("audit model.safetensors", "python -c pass", fake(0.05, 9), check="bertconv ≤ 3× this",
                       passed=False, why="imports")
    section.rows.append(bound)
    section.extra = report.time_per_gb([section], (("tf", "hf"),))
    text = report.render([section], command="python -m benchmarks --quick", reps=2)

    assert math.isclose(ref.ratio, 8.0 / 0.25)
    assert "python -m benchmarks --quick" in text and "## tiny" in text and "- a note" in text
    assert "| audit model.safetensors | transformers | 8.00 | 32.0× | 350 | ≥30×: PASS |" in text
    assert "| audit model.safetensors | python -c pass | 0.05 |  | 9 | bertconv ≤ 3× this: FAIL | imports |" in text
    assert "| tiny | 1.34 | 1.49 | 15 |" in text  # 2.00 s for 1.34 GB: 1.49 s/GB, 15 s for 10 GB
    assert "≥5×: FAIL" in text
    assert "| tf → hf | 1,278 | 119 | 2.00 | 2.0× | PASS | 1.2× | 200 | 269 | PASS | yes |" in text
    assert "| hf → tf | 1,278 | 119 | 4.00 | 4.0× | FAIL |  | 400 | 269 | FAIL | - |" in text
    assert "| hf-safetensors | 420 | 586 | 6,836 | 586 | 0.30 | PASS |" in text
    assert "CPU" in text and "Python" in text and "numpy" in text


def test_a_busy_machine_is_not_idle_and_its_runs_are_marked():
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)  # the spinners are running
        assert measure.wait_for_idle(0) is False
        [m] = measure.measure_alternating([measure.Job(["true"])], reps=2, idle_wait=0.01)
        assert m.busy_runs == 2 and all(s.exit_code == 0 for s in m.samples)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert measure.measure_alternating([measure.Job(["true"])], reps=1)[0].busy_runs == 0  # no idle_wait: never marked


@requires("safetensors")  # the inputs' writer
def test_a_section_builds_its_inputs_in_an_empty_bench_dir(tmp_path, monkeypatch):
    """`python -m benchmarks` from a fresh clone: a section's title gives the size of inputs the
    section itself builds first (the whole quick run takes minutes: here the tiny model, one
    input kind, and the section's first row)."""
    from benchmarks import conversions, inputs

    monkeypatch.setenv("BERTCONV_BENCH_DIR", str(tmp_path / "bench"))
    messages = []
    title = conversions.prepare_inputs("tiny", ["hf-safetensors"], messages.append)
    built = inputs.entry_path("tiny", "hf-safetensors")
    assert built.is_file() and (built.parent / inputs.COMPLETE_MARK).is_file()
    assert title == f"tiny: {built.stat().st_size / 2**20:,.0f} MiB in model.safetensors"
    assert any("building tiny hf-safetensors" in m for m in messages)
    runner = conversions.Runner(1, tmp_path / "out", messages.append)
    audit = runner.run([*BERTCONV, "audit", built])
    assert audit is not None and audit.samples[0].exit_code == 0


@requires("safetensors")
@pytest.mark.parametrize("kind", ["hf-tf", "hf-flax"])
def test_inputs_bertconv_writes_are_built_from_the_safetensors_input(tmp_path, monkeypatch, kind):
    """Issue 15's formats: built with `bertconv convert` from the hf-safetensors input (built
    first), and read back by `bertconv audit`."""
    from benchmarks import inputs

    monkeypatch.setenv("BERTCONV_BENCH_DIR", str(tmp_path / "bench"))
    inputs.ensure("tiny", kind, log=lambda message: None)
    built = inputs.entry_path("tiny", kind)
    assert built.is_file() and (built.parent / "config.json").is_file()
    assert inputs.data_files("tiny", kind) == [built]
    assert (inputs.input_dir("tiny", "hf-safetensors") / inputs.COMPLETE_MARK).is_file()
    assert measure.run_once([*BERTCONV, "audit", built], cwd=ROOT).exit_code == 0


def test_each_timed_run_reads_the_commands_inputs_first(tmp_path, monkeypatch):
    """The table says inputs are in the page cache for every timed run: a machine that reclaims
    idle page cache evicts them between rows, so each run's inputs are read just before it."""
    from benchmarks import conversions

    monkeypatch.setenv("BERTCONV_BENCH_DIR", str(tmp_path))
    weights = tmp_path / "base" / "hf-safetensors" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"w")
    (weights.parent / "config.json").write_text("{}")
    prefix = tmp_path / "base" / "tf" / "bert_model.ckpt"
    prefix.parent.mkdir(parents=True)
    for suffix in (".index", ".data-00000-of-00001"):
        Path(f"{prefix}{suffix}").write_bytes(b"t")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    elsewhere = tmp_path.parent / "not-an-input.txt"
    command = ["tool", str(weights), str(prefix), str(weights.parent), str(out_dir / "result"), str(elsewhere)]
    assert conversions.command_inputs(command, outputs=out_dir) == [
        weights, Path(f"{prefix}.data-00000-of-00001"), Path(f"{prefix}.index"),
        weights.parent / "config.json", weights]

    warmed = []
    monkeypatch.setattr(conversions, "warm", lambda paths: warmed.append(list(paths)))
    runner = conversions.Runner(reps=2, out_dir=out_dir, log=lambda line: None)
    assert runner.run([sys.executable, "-c", "pass", str(weights)]) is not None
    assert warmed == [[weights], [weights]]


def _appender(log: Path, word: str, exit_code: int = 0) -> list[str]:
    return [sys.executable, "-c", f"open({str(log)!r}, 'a').write({word!r} + ' '); raise SystemExit({exit_code})"]


def test_measured_commands_take_turns(tmp_path):
    """A ratio between two commands is measured with their runs interleaved, so both meet the
    same machine: A B A B A B, not A A A B B B."""
    log = tmp_path / "order"
    a, b = measure.measure_alternating([measure.Job(_appender(log, "A")), measure.Job(_appender(log, "B"))], reps=3)
    assert log.read_text().split() == ["A", "B"] * 3
    assert (a.reps, b.reps) == (3, 3)
    assert a.command[-1].endswith("SystemExit(0)") and "'B'" in b.command[-1]


def test_runner_measures_commands_in_turns_and_a_failure_spares_the_others(tmp_path):
    from benchmarks import conversions

    log, messages = tmp_path / "order", []
    runner = conversions.Runner(reps=2, out_dir=tmp_path / "out", log=messages.append)
    output = tmp_path / "out" / "made"
    output.parent.mkdir()
    make = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('M '); open({str(output)!r}, 'w').write('x')"]
    fails, made, one = runner.run_alternating([conversions.Command(_appender(log, "F", exit_code=3)),
                                               conversions.Command(make, output),
                                               conversions.Command(_appender(log, "E", exit_code=1), exit_codes=(0, 1))])
    assert fails is None and made is not None and one is not None
    assert log.read_text().split() == ["F", "M", "E", "M", "E", "M", "E"]  # untimed first runs, then turns
    assert not output.exists()  # removed after the last run
    assert any("FAILED" in m and "exited 3" in m for m in messages)
    again = runner.run_alternating([conversions.Command(_appender(log, "F", exit_code=3)),
                                    conversions.Command(make, output),
                                    conversions.Command(_appender(log, "E", exit_code=1), exit_codes=(0, 1))])
    assert again == [None, made, one]  # the same command lines in one call share their measurement
    assert log.read_text().split() == ["F", "M", "E", "M", "E", "M", "E"]


def test_a_command_failing_after_its_first_run_is_not_measured(tmp_path):
    from benchmarks import conversions

    log, messages = tmp_path / "runs", []
    runner = conversions.Runner(reps=2, out_dir=tmp_path / "out", log=messages.append)
    flaky = [sys.executable, "-c", f"import os; p = {str(log)!r}; runs = os.path.getsize(p) if os.path.exists(p) else 0; "
                                   f"open(p, 'a').write('x'); raise SystemExit(4 if runs else 0)"]
    assert runner.run_alternating([conversions.Command(flaky), conversions.Command(_appender(tmp_path / "b", "B"))])[0] is None
    assert any("FAILED" in m and "exited 4" in m for m in messages)


def test_a_quick_run_prints_its_table_and_leaves_no_file(tmp_path, monkeypatch, capsys):
    """`python -m benchmarks --quick` prints its table and writes nothing into the working tree
    (the measuring itself, minutes long, replaced by one measured row); --output keeps it."""
    from benchmarks import __main__ as entry, conversions

    row = report.Row("audit model.safetensors", "bertconv",
                     measure.measure_alternating([measure.Job(["true"])], reps=1)[0])
    monkeypatch.setattr(conversions, "run", lambda sizes, reps, log, idle_wait: [report.Section(
        f"{sizes} x{reps}", [row], [], [], [])])
    monkeypatch.setattr(conversions, "runtime_section", lambda reps, quick, log: [])
    tree_before = sorted(p for p in (ROOT / "benchmarks").rglob("*") if "__pycache__" not in p.parts)

    assert entry.main(["--quick"]) == 0
    printed = capsys.readouterr().out
    assert "python -m benchmarks --quick" in printed and "## ['base'] x1" in printed
    assert sorted(p for p in (ROOT / "benchmarks").rglob("*") if "__pycache__" not in p.parts) == tree_before

    assert entry.main(["--quick", "--output", str(tmp_path / "quick.md")]) == 0
    assert (tmp_path / "quick.md").read_text().strip() == capsys.readouterr().out.strip()
    assert entry.results_file(None, partial=False) == ROOT / "benchmarks" / "RESULTS.md"
    assert entry.results_file(None, partial=True) is None
