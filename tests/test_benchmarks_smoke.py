"""Smoke test of the benchmark harness on a few-KB fixture: the measuring helpers and the table
printer run and produce what the tables need. No timing is asserted.

Every process here is started once per result: the tiny inputs are built once for the module (in
one bench directory, `bench`), the verify reference runs once over both of its fixtures, and the
sections run without the untimed first run of each command (`Runner(untimed_first_run=False)`:
with one timed run it would run each command twice for the same output, transformers' included;
what a section computes and checks is unchanged; the runner tests below keep it).
"""

from __future__ import annotations

import inspect
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
from conftest import needs, requires, run_in_process

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "hf" / "pretraining"
BERTCONV = [sys.executable, "-m", "bertconv.cli"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One empty bench directory ($BERTCONV_BENCH_DIR) for the module's tiny inputs."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        directory = tmp_path_factory.mktemp("bench")
        monkeypatch.setenv("BERTCONV_BENCH_DIR", str(directory))
        yield directory


def test_measured_commands_use_and_write_bytecode_beside_the_sources(monkeypatch):
    """A measured command reads the bytecode pip compiled for torch and transformers, and writes
    bertconv's own, whatever the session says: with a fresh PYTHONPYCACHEPREFIX, the first
    command importing transformers took 17 s here against 6 s."""
    from benchmarks import inputs

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/nonexistent")
    proc = subprocess.run([sys.executable, "-c", "import sys; print(sys.pycache_prefix, sys.flags.dont_write_bytecode)"],
                          env=inputs.oracle_env(), capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["None", "0"]


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


VERIFY_VERDICTS = [
    ("pretraining", 0, "MLM head missing: none; tied: True; initializer values: False"),
    ("bert_model", 1, "MLM head missing: ['cls.predictions"),
]
#: Runs a script as `python SCRIPT DIR` would, once per DIR, in one process (transformers and torch
#: imported once): its exit status and stdout per DIR, as JSON.
RUN_PER_DIRECTORY = """
import contextlib, io, json, runpy, sys
script, results = sys.argv[1], []
for directory in sys.argv[2:]:
    sys.argv, stdout = [script, directory], io.StringIO()
    with contextlib.redirect_stdout(stdout):
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as exit:
            status = exit.code
    results.append([status, stdout.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def verify_reference():
    """fixture -> (exit status, stdout) of benchmarks/reference/hf_verify_head.py on it."""
    fixtures = [fixture for fixture, _, _ in VERIFY_VERDICTS]
    run = subprocess.run([sys.executable, "-c", RUN_PER_DIRECTORY, ROOT / "benchmarks" / "reference" / "hf_verify_head.py",
                          *(ROOT / "fixtures" / "hf" / fixture for fixture in fixtures)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return dict(zip(fixtures, map(tuple, json.loads(run.stdout.splitlines()[-1]))))


@requires("transformers", "torch")
@pytest.mark.parametrize("fixture, exit_code, says", VERIFY_VERDICTS)
def test_verify_reference_reaches_bertconv_verify_verdict(verify_reference, fixture, exit_code, says):
    """The reference the verify row is timed against does the work `bertconv verify` does: it
    finds a missing head (and would pass the same checkpoints)."""
    status, stdout = verify_reference[fixture]
    assert (status, says in stdout) == (exit_code, True), stdout
    assert run_in_process("verify", ROOT / "fixtures" / "hf" / fixture).exit_code == exit_code


def fake(seconds: float, rss_mib: float, io=None) -> measure.Measurement:
    """A measurement of two runs of `seconds` each, peaking at `rss_mib`."""
    sample = measure.Sample(seconds, int(rss_mib * report.MIB), 0, seconds, 0.0, io or {})
    return measure.Measurement(("x",), (sample, sample))


def test_table_printer(tmp_path):
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
    assert "| tf → hf | 1,278 | 119 | 2.00 | 2.0× | PASS | 1.60 | 1.2× | PASS | 200 | 269 | PASS | yes |" in text
    assert "| hf → tf | 1,278 | 119 | 4.00 | 4.0× | FAIL | - |  |  | 400 | 269 | FAIL | - |" in text
    slow_write = report.PairRow("hf", "tf", 1_340_000_000, largest, fake(2.5, 200), cp=fake(1.0, 9), cp_sync=fake(1.6, 9))
    section.pairs.append(slow_write)
    text = report.render([section], command="python -m benchmarks --quick", reps=2)
    assert "| hf → tf | 1,278 | 119 | 2.50 | 2.5× | PASS | 1.60 | 1.6× | FAIL | 200 | 269 | PASS | - |" in text
    assert "| hf-safetensors | 420 | 586 | 6,836 | 586 | 0.30 | PASS |" in text
    assert "CPU" in text and "Python" in text and "numpy" in text
    assert "(medians of 2 run(s) per row, each a whole process;" in text  # every pair row of two runs too
    longer = report.Section("bert-base (L=12)", [], [report.PairRow("tf", "hf", 1, 1, measure.Measurement(
        ("x",), (fake(0.5, 9).samples[0],) * 7), cp=fake(1.0, 9))])
    text = report.render([section, longer], command="make bench", reps=2)
    assert "(medians of 2 run(s) per row, 7 for bert-base's pair rows, each a whole process;" in text


def test_the_onnx_section_holds_each_exporter_to_the_conversion_goal():
    """The ONNX export is a conversion: each reference exporter's ratio to bertconv's time is
    printed and held to the conversion goal (issue 31), as the other sections' rows are."""
    from benchmarks import onnx_export

    rows = onnx_export.table(["bertconv convert --to onnx", "torch.onnx.export", "optimum"],
                             [fake(2.0, 1200), fake(9.0, 2400), fake(11.0, 2500)], [4.1e-8, 4.3e-8, 4.1e-8],
                             [418 * report.MIB, 507 * report.MIB, 507 * report.MIB])
    assert rows[2:] == [
        "| bertconv convert --to onnx | 2.0 s |  | 1,200 MiB | 418 MiB | 4.1e-08 |  |",
        "| torch.onnx.export | 9.0 s | 4.5× | 2,400 MiB | 507 MiB | 4.3e-08 | ≥5×: FAIL |",
        "| optimum | 11.0 s | 5.5× | 2,500 MiB | 507 MiB | 4.1e-08 | ≥5×: PASS |"]
    assert [len(row.split("|")) for row in rows] == [9] * 5


def test_a_busy_machine_is_not_idle_and_its_runs_are_marked():
    # Twice the share of the CPUs that makes a machine busy (one spinner on 2 cores: half busy).
    busy_cpus = math.ceil(2 * (1 - measure.IDLE_SHARE) * (os.cpu_count() or 1))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy_cpus)]
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


@pytest.fixture(scope="module")
def tiny_inputs(bench):
    """The tiny hf-safetensors input, built by a section's `prepare_inputs` in the empty bench
    directory (`bench`), once for the module: the section's title and the messages logged."""
    from benchmarks import conversions

    assert not (bench / "tiny").exists()
    messages = []
    yield conversions.prepare_inputs("tiny", ["hf-safetensors"], messages.append), messages


@requires("safetensors")  # the inputs' writer
def test_a_section_builds_its_inputs_in_an_empty_bench_dir(tiny_inputs, tmp_path):
    """`python -m benchmarks` from a fresh clone: a section's title gives the size of inputs the
    section itself builds first (the whole quick run takes minutes: here the tiny model, one
    input kind, and the section's first row)."""
    from benchmarks import conversions, inputs

    title, messages = tiny_inputs
    built = inputs.entry_path("tiny", "hf-safetensors")
    assert built.is_file() and (built.parent / inputs.COMPLETE_MARK).is_file()
    assert title == f"tiny: {built.stat().st_size / 2**20:,.0f} MiB in model.safetensors"
    assert any("building tiny hf-safetensors" in m for m in messages)
    runner = conversions.Runner(1, tmp_path / "out", messages.append, untimed_first_run=False)
    audit = runner.run([*BERTCONV, "audit", built])
    assert audit is not None and audit.samples[0].exit_code == 0


@requires("safetensors")
@pytest.mark.parametrize("kind", ["hf-tf", "hf-flax"])
def test_inputs_bertconv_writes_are_built_from_the_safetensors_input(tiny_inputs, kind):
    """Issue 15's formats: built with `bertconv convert` from the hf-safetensors input (built
    first, and once), and read back by `bertconv audit`."""
    from benchmarks import inputs

    messages = []
    inputs.ensure("tiny", kind, log=messages.append)
    built = inputs.entry_path("tiny", kind)
    assert built.is_file() and (built.parent / "config.json").is_file()
    assert inputs.data_files("tiny", kind) == [built]
    assert (inputs.input_dir("tiny", "hf-safetensors") / inputs.COMPLETE_MARK).is_file()
    assert [m for m in messages if m.startswith("building")] == [f"building tiny {kind} input in {built.parent} ..."]
    assert run_in_process("audit", built).exit_code == 0


@requires("safetensors")  # the inputs' writer
def test_the_startup_rows_hold_audit_and_inspect_of_each_input_against_a_bare_interpreter(tiny_inputs, tmp_path,
                                                                                         monkeypatch):
    """Issue 31: `audit` and `inspect` of each input kind are each measured against `python -c
    pass`, all taking turns, and each row says its ratio and verdict; an HDF5 input's failure
    gives its own reason."""
    from benchmarks import conversions, inputs, report

    for kind in ("hf-flax", "hf-tf"):
        inputs.ensure("tiny", kind, log=lambda line: None)  # built by the test above when it ran
    monkeypatch.setattr(conversions, "STARTUP_REPS", 2)
    section = report.Section("tiny")
    conversions.startup_row("tiny", section, conversions.Runner(1, tmp_path / "out", lambda line: None,
                                                                untimed_first_run=False),
                            ["hf-safetensors", "hf-flax", "hf-tf"])
    assert [row.task for row in section.rows] == ["audit model.safetensors", "inspect model.safetensors",
                                                  "audit flax_model.msgpack", "inspect flax_model.msgpack",
                                                  "audit tf_model.h5", "inspect tf_model.h5"]
    for row, command in zip(section.rows, ("audit", "inspect") * 3):
        assert row.tool == "python -c pass (interpreter start-up)" and row.passed is not None
        assert row.note.startswith(f"bertconv {command} = ") and "medians of 2 runs each" in row.note
    assert [row.why for row in section.rows] == [conversions.WHY["startup"]] * 4 + [conversions.WHY["startup-hdf5"]] * 2


def test_a_sub_gib_conversion_is_held_to_its_copy_line_by_more_runs_unless_one_was_asked(tmp_path, monkeypatch):
    """A bert-base pair row's margin to 1.5x (cp + sync) is about the disk's jitter: its medians are
    of `SHORT_PAIR_REPS` runs a side; a large input's keep the run's reps, and a --quick run's one."""
    from benchmarks import conversions

    sizes = {"base": 440_000_000, "large": 1_340_000_000}
    monkeypatch.setattr(conversions, "file_bytes", lambda size, kind: sizes[size])
    runner = lambda reps: conversions.Runner(reps, tmp_path, lambda line: None)
    assert conversions.pair_reps("base", "tf", runner(3)) == conversions.SHORT_PAIR_REPS == 7
    assert conversions.pair_reps("base", "tf", runner(9)) == 9
    assert conversions.pair_reps("base", "tf", runner(1)) == 1
    assert conversions.pair_reps("large", "tf", runner(3)) == 3


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


def test_bertconv_and_its_references_take_turns_in_their_rows(tmp_path):
    """A row's ratio to a reference tool is measured with their runs interleaved (a drift of the
    machine between two blocks of runs once made a 7x conversion read 4.6x): bertconv's row, then
    each reference's, held to its goal against bertconv's."""
    from benchmarks import conversions, report

    log = tmp_path / "order"
    runner = conversions.Runner(reps=3, out_dir=tmp_path / "out", log=lambda line: None, untimed_first_run=False)
    section = report.Section("tiny")
    mine = conversions.against_references(
        section, runner, "convert X", conversions.Command(_appender(log, "B")),
        [("tool one", _appender(log, "R"), report.CONVERT_GOAL, None), ("tool two", _appender(log, "S"), None, None)])
    assert log.read_text().split() == ["B", "R", "S"] * 3
    assert [(row.task, row.tool) for row in section.rows] == [("convert X", "bertconv"), ("convert X", "tool one"),
                                                              ("convert X", "tool two")]
    assert section.rows[0] is mine and all(row.bertconv is mine for row in section.rows[1:])
    assert section.rows[1].goal == report.CONVERT_GOAL and section.rows[1].ratio is not None
    assert section.rows[1].why == conversions.WHY["convert"] and section.rows[2].goal is None


def test_a_runner_told_so_starts_each_command_for_its_timed_runs_alone(tmp_path):
    from benchmarks import conversions

    log = tmp_path / "order"
    runner = conversions.Runner(reps=2, out_dir=tmp_path / "out", log=lambda line: None, untimed_first_run=False)
    assert None not in runner.run_alternating([conversions.Command(_appender(log, "A")),
                                               conversions.Command(_appender(log, "B"))])
    assert log.read_text().split() == ["A", "B"] * 2


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
    from benchmarks import __main__ as entry, conversions, families, onnx_export

    row = report.Row("audit model.safetensors", "bertconv",
                     measure.measure_alternating([measure.Job(["true"])], reps=1)[0])
    monkeypatch.setattr(conversions, "run", lambda sizes, reps, log, idle_wait: [report.Section(
        f"{sizes} x{reps}", [row], [], [], [])])
    monkeypatch.setattr(conversions, "runtime_section", lambda reps, quick, log: [])
    monkeypatch.setattr(onnx_export, "section", lambda reps, log: [])
    monkeypatch.setattr(families, "run", lambda keys, reps, log, idle_wait: [report.Section(f"families {keys}")])
    tree_before = sorted(p for p in (ROOT / "benchmarks").rglob("*") if "__pycache__" not in p.parts)

    assert entry.main(["--quick"]) == 0
    printed = capsys.readouterr().out
    assert "python -m benchmarks --quick" in printed and "## ['base'] x1" in printed
    assert "## families ['distilbert']" in printed  # one family: the quick run stays quick
    assert sorted(p for p in (ROOT / "benchmarks").rglob("*") if "__pycache__" not in p.parts) == tree_before

    assert entry.main(["--quick", "--output", str(tmp_path / "quick.md")]) == 0
    assert (tmp_path / "quick.md").read_text().strip() == capsys.readouterr().out.strip()
    assert entry.results_file(None, partial=False) == ROOT / "benchmarks" / "RESULTS.md"
    assert entry.results_file(None, partial=True) is None


def test_sizes_and_families_are_selected_apart():
    """Neither given: everything (a quick run: bert-base and one family); one given: only it."""
    from benchmarks import __main__ as entry, families

    assert entry.selection(None, None, quick=False) == (["base", "large", "xlmr", "xlm-roberta"], list(families.FAMILIES))
    assert entry.selection(None, None, quick=True) == (["base"], ["distilbert"])
    assert entry.selection(None, ["esm"], quick=False) == ([], ["esm"])
    assert entry.selection(["large"], None, quick=True) == (["large"], [])


# --- the family rows (issue 28) -------------------------------------------------------------------

@requires("transformers")
def test_every_family_row_is_declared_for_a_family_bertconv_reads_and_transformers_has():
    """Each declaration names a family bertconv knows, config fields its transformers class has or
    its model reads (DeBERTa's `position_buckets` is read with a default, never declared; a
    misspelt field would be kept silently by `for_model` and build another size), a fixture
    whose tokenizer transformers loads, and a text with one mask token."""
    transformers = needs("transformers")
    from benchmarks import families
    from bertconv import families as bertconv_families
    from bertconv.config.dialects import computed_keys
    from bertconv.families.family import HF

    for key, bench in families.FAMILIES.items():
        fields = dict(bench.config)
        model_type = fields.pop("model_type")
        assert bertconv_families.named(model_type) is not None, key
        assert (ROOT / bench.tokenizer / "config.json").is_file(), key
        assert sum(bench.text.count(mask) for mask in ("[MASK]", "<mask>")) == 1, key
        if bench.python:  # another transformers (NEZHA: 4.57's)
            continue
        defaults = transformers.AutoConfig.for_model(model_type)
        takes = inspect.signature(type(defaults).__init__).parameters
        read = computed_keys(bertconv_families.named(model_type), HF)
        assert [name for name in fields if not (hasattr(defaults, name) or name in takes or name in read)] == [], key


TINY_XLMR = dict(model_type="xlm-roberta", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=37, vocab_size=99, max_position_embeddings=40, type_vocab_size=1,
                 layer_norm_eps=1e-5)


@pytest.fixture(scope="module")
def tiny_family(bench):
    """A family row at a few KB (XLM-R's tokenizer: a Unigram, padded by position), shared by the
    module's family tests, and its input: built once by transformers, over a cache that holds the
    input of another spec (V=101), and the messages `families.ensure` logged."""
    from benchmarks import families, inputs

    with pytest.MonkeyPatch.context() as monkeypatch:
        tiny = families.Bench("XLM-RoBERTa", "a tiny", TINY_XLMR, "fixtures/family_hf/xlm_roberta/masked_lm",
                              "The capital of France is <mask>.")
        monkeypatch.setitem(families.FAMILIES, "tiny", tiny)
        stale = families.Bench(**{**tiny.__dict__, "config": {**TINY_XLMR, "vocab_size": 101}})
        directory = families.input_dir("tiny")
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(json.dumps(stale.config))
        (directory / inputs.COMPLETE_MARK).write_text(json.dumps(stale.spec()))
        assert inputs.is_complete(directory, stale.spec()) and not inputs.is_complete(directory, tiny.spec())
        messages = []
        families.ensure("tiny", messages.append)
        yield tiny, messages


@requires("transformers", "torch", "tokenizers")
def test_a_family_section_measures_both_tools_and_checks_their_outputs(tiny_family):
    """The section's four rows on a tiny model (the heavy rows run the same code at base size):
    the memory bound, the ratios against the goals, transformers' saved tensors compared with
    bertconv's, and the top token of both fill-masks."""
    from benchmarks import families

    messages = []
    [section] = families.run(["tiny"], 1, messages.append, untimed_first_run=False)
    assert not any("building" in m for m in messages)  # the input `tiny_family` built
    convert, convert_reference, fill, fill_reference = section.rows
    assert section.title.startswith("XLM-RoBERTa (a tiny's size: L=2, H=32, V=99, fp32)")
    assert convert.verdict == f"RSS ≤ {(99 * 32 * 4 + report.RSS_HEADROOM) / report.MIB:,.0f} MiB (largest tensor + 150): PASS"
    assert convert.note == "output = transformers' save_pretrained, bit for bit: yes"
    assert convert_reference.bertconv is convert and convert_reference.goal == report.CONVERT_GOAL
    assert "AutoModelForMaskedLM" in convert_reference.tool and convert_reference.ratio is not None
    assert fill.verdict == "same top token as the pipeline: PASS" and fill.note.startswith("top token ids: bertconv ")
    assert fill_reference.bertconv is fill and fill_reference.ratio is not None
    assert not (families.input_dir("tiny").parent.parent / "out-families").exists()


@requires("transformers", "torch")
def test_a_family_input_is_built_by_transformers_with_the_tokenizer_padded(tiny_family):
    transformers = needs("transformers")
    from benchmarks import families

    tiny, messages = tiny_family
    assert sum("building" in m for m in messages) == 1  # a cache of another spec is rebuilt
    directory = families.ensure("tiny", messages.append)
    assert directory == families.input_dir("tiny")
    config = json.loads((directory / "config.json").read_text())
    fixture = json.loads((ROOT / tiny.tokenizer / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["vocab_size"]) == ("xlm-roberta", 32, 99)
    assert (config["pad_token_id"], config["bos_token_id"]) == (fixture["pad_token_id"], fixture["bos_token_id"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert len(tokenizer) == 99 and tokenizer.convert_ids_to_tokens(98) == "<filler98>"
    assert tokenizer.mask_token_id == transformers.AutoTokenizer.from_pretrained(ROOT / tiny.tokenizer).mask_token_id
    assert families.largest_tensor_bytes(directory / "model.safetensors") == 99 * 32 * 4  # the embedding table
    assert sum("building" in m for m in messages) == 1  # the same spec: not rebuilt


def test_padding_a_tokenizer_json_keeps_every_id_and_fills_the_free_ones(tmp_path):
    from benchmarks.family_inputs import pad_tokenizer_json, pad_vocab_txt

    wordpiece = tmp_path / "wordpiece.json"
    wordpiece.write_text(json.dumps({"model": {"vocab": {"[PAD]": 0, "a": 1}},
                                     "added_tokens": [{"id": 3, "content": "[MASK]"}]}))
    assert pad_tokenizer_json(wordpiece, 6) == 3
    assert json.loads(wordpiece.read_text())["model"]["vocab"] == {"[PAD]": 0, "a": 1, "<filler2>": 2, "<filler4>": 4,
                                                                   "<filler5>": 5}
    unigram = tmp_path / "unigram.json"
    unigram.write_text(json.dumps({"model": {"vocab": [["<s>", 0.0], ["▁a", -2.5]]}}))
    assert pad_tokenizer_json(unigram, 4) == 2
    assert json.loads(unigram.read_text())["model"]["vocab"][2:] == [["<filler2>", -12.5], ["<filler3>", -12.5]]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<cls>\nA\n")
    assert (pad_vocab_txt(vocab, 3), vocab.read_text()) == (1, "<cls>\nA\n<filler2>\n")
    assert pad_vocab_txt(vocab, 3) == 0


def test_tensors_are_compared_by_name_shape_and_bytes(tmp_path):
    safetensors = needs("safetensors.numpy")
    import numpy as np
    from benchmarks.families import same_tensors

    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    safetensors.save_file({"x": np.arange(4, dtype=np.float32), "y": np.ones(2, np.float32)}, str(a))
    safetensors.save_file({"y": np.ones(2, np.float32), "x": np.arange(4, dtype=np.float32)}, str(b),
                          metadata={"format": "pt"})
    assert same_tensors(a, b) == "yes"
    safetensors.save_file({"x": np.arange(4, dtype=np.float32), "y": np.zeros(2, np.float32)}, str(b))
    assert same_tensors(a, b) == "NO: values differ (1: y)"
    safetensors.save_file({"x": np.arange(4, dtype=np.float32), "z": np.ones(2, np.float32)}, str(b))
    assert same_tensors(a, b) == "NO: names differ (1: y only in bertconv's; 1: z only in transformers')"
    assert same_tensors(a, tmp_path / "absent") == ""
