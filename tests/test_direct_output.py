"""`containers/direct_output.py`: large outputs written past the page cache, byte for byte what a
buffered write makes, with every fallback a file system can force."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import resource
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.measure import resident_bytes, resident_pages
from bertconv import formats, transposes
from bertconv.containers import direct_output, mapped_matrix, safetensors_file, stream
from bertconv.containers.direct_output import ALIGNMENT, DirectOutput, open_output
from bertconv.containers.tensorflow import bundle
from bertconv.conversion import convert
from bertconv.dtypes import FLOAT32
from bertconv.errors import BadInput
from google_crc32c import cext as crc32c
from bertconv.tensor import ArrayTensor, MappedTensor, TransposedTensor

from conftest import FIXTURES, without_system_call

TF_FULL = FIXTURES / "tf" / "full" / "bert_model.ckpt"

BLOCK = 2 * ALIGNMENT  # small blocks: a few kilobytes cross many block boundaries
SOURCE_BYTES = 5 * BLOCK + 123


def direct_or_skip(path: Path, size: int = 0, **kwargs) -> DirectOutput:
    try:
        return DirectOutput(path, size, **kwargs)
    except OSError as error:
        if error.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            pytest.skip(f"the file system of {path.parent} does not take O_DIRECT")
        raise


@pytest.fixture
def source(tmp_path) -> tuple[Path, bytes]:
    data = os.urandom(SOURCE_BYTES)
    path = tmp_path / "source.bin"
    path.write_bytes(data)
    return path, data


pieces = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 3 * BLOCK)),
    st.tuples(st.just("copy"), st.integers(0, SOURCE_BYTES - 1), st.integers(0, 3 * BLOCK)),
    st.tuples(st.just("stage"), st.integers(0, BLOCK)),
), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=pieces, seed=st.integers(0, 255))
def test_the_file_holds_exactly_what_was_written_and_copied(tmp_path, source, pieces, seed):
    source_path, source_data = source
    out_path = tmp_path / "out.bin"
    expected = bytearray()
    with direct_or_skip(out_path, 0, block_bytes=BLOCK) as out:
        for piece in pieces:
            if piece[0] == "write":
                data = bytes((seed + i) % 256 for i in range(piece[1]))
                assert out.write(data) == len(data)
            elif piece[0] == "stage":  # filled in place, at most the room the block has left
                room = out.staging()
                assert len(room) > 0
                data = bytes((seed + 3 * i) % 256 for i in range(min(piece[1], len(room))))
                room[:len(data)] = data
                out.staged(len(data))
            else:
                _, offset, nbytes = piece
                nbytes = min(nbytes, SOURCE_BYTES - offset)
                out.copy_from(source_path, offset, nbytes)
                data = source_data[offset:offset + nbytes]
            expected += data
            assert out.tell() == len(expected)
    assert out_path.read_bytes() == bytes(expected)


@pytest.mark.parametrize("ending", ["normally", "on an error"])
def test_a_file_copied_from_many_times_is_opened_once_and_closed_at_the_end(tmp_path, source, ending):
    source_path, source_data = source
    other = tmp_path / "other.bin"
    other.write_bytes(source_data[::-1])
    before = set(os.listdir("/proc/self/fd"))
    out = direct_or_skip(tmp_path / "out.bin", 0, block_bytes=BLOCK)
    with pytest.raises(RuntimeError) if ending == "on an error" else contextlib.nullcontext():
        with out:
            for offset in range(0, 40 * 100, 100):
                out.copy_from(source_path, offset, 100)
                out.copy_from(other, offset, 100)
            opened = set(os.listdir("/proc/self/fd")) - before
            assert len(opened) == 3, "the output and one descriptor per source file"
            if ending == "on an error":
                raise RuntimeError("the caller failed")
    assert set(os.listdir("/proc/self/fd")) - before == set()
    if ending == "normally":
        expected = b"".join(source_data[o:o + 100] + source_data[::-1][o:o + 100] for o in range(0, 4000, 100))
        assert (tmp_path / "out.bin").read_bytes() == expected


def test_staging_more_than_the_block_has_room_for_is_refused(tmp_path):
    with direct_or_skip(tmp_path / "out.bin", 0, block_bytes=BLOCK) as out:
        out.write(b"x" * 10)
        with pytest.raises(ValueError, match="staged"):
            out.staged(BLOCK - 9)
        assert out.tell() == 10


@pytest.mark.parametrize("shape", [(37, 300), (1500, 3), (1, 5000), (5, 1)])
def test_transposes_computed_into_the_staging_blocks_are_the_buffered_bytes(tmp_path, monkeypatch, shape):
    """A transpose written straight into the blocks (rows crossing a block's end included) makes
    the bytes the buffered writer makes from the transposed array; a transpose of a transpose is
    still its original's bytes."""
    with direct_or_skip(tmp_path / "probe.bin"):
        pass
    base = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    transposed = TransposedTensor(ArrayTensor(base, FLOAT32))
    twice = TransposedTensor(TransposedTensor(ArrayTensor(base.T.copy(), FLOAT32)))
    tensors = [("kernel", FLOAT32, transposed.shape, transposed), ("twice", FLOAT32, twice.shape, twice),
               ("bias", FLOAT32, (3,), lambda: np.ones(3, np.float32))]
    buffered, direct = tmp_path / "buffered.safetensors", tmp_path / "direct.safetensors"
    safetensors_file.write_file(buffered, tensors)
    monkeypatch.setattr(direct_output, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(direct_output, "BLOCK_BYTES", BLOCK)
    staged = []
    real_staged = DirectOutput.staged
    monkeypatch.setattr(DirectOutput, "staged", lambda self, n: staged.append(n) or real_staged(self, n))
    safetensors_file.write_file(direct, tensors)
    assert staged, "no transpose was computed into the staging blocks"
    assert direct.read_bytes() == buffered.read_bytes()
    header = safetensors_file.read_header(direct)
    np.testing.assert_array_equal(header.tensors["kernel"].read(), base.T)
    np.testing.assert_array_equal(header.tensors["twice"].read(), base.T)


#: Matrices of a file transposed from its map: a block's worth and more, rows crossing block ends,
#: single rows and columns.
MAPPED_SHAPES = [(37, 300), (300, 37), (1, 700), (700, 1), (64, 64)]


@pytest.mark.parametrize("source_lead", [0, 3], ids=["source aligned", "source at odd bytes"])
@pytest.mark.parametrize("lead", [1000, 1001], ids=["aligned", "odd byte"])
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_matrices_transposed_from_their_map_are_numpys_transposes_with_their_checksums(tmp_path, monkeypatch,
                                                                                       lead, direct, source_lead):
    """The transposes of float32 matrices stored verbatim in a file, copied by OpenBLAS from a map
    of it (`containers/mapped_matrix.py`; values at odd bytes, a msgpack stream's, through an
    aligned copy): into the staging blocks (rows crossing a block's end included), through a
    scratch where the next byte is odd or the output buffered, numpy's `.T` bit for bit; each
    tensor's CRC32C is that of its bytes. A matrix holding a signalling NaN, which OpenBLAS would
    make quiet, goes through NumPy and keeps its bits."""
    if not transposes.transposes_at_addresses():
        pytest.skip("no OpenBLAS beside NumPy: transposes go by NumPy's tiles")
    rng = np.random.default_rng(lead)
    matrices = [rng.standard_normal(shape).astype(np.float32) for shape in MAPPED_SHAPES]
    matrices[2].view(np.uint32)[0, 350] = 0x7F800001  # a signalling NaN
    source = tmp_path / "source.bin"
    offsets = []
    with open(source, "wb") as file:
        file.write(b"s" * source_lead)
        for matrix in matrices:
            offsets.append(file.tell())
            file.write(matrix.tobytes())
    pieces = [b"h" * lead]
    for k, (matrix, offset) in enumerate(zip(matrices, offsets)):
        transposed = TransposedTensor(MappedTensor(source, offset, FLOAT32, matrix.shape))
        pieces.append((f"t{k}", FLOAT32, transposed.shape, transposed))
    mapped = []
    real_load = mapped_matrix.MatrixSource.load
    monkeypatch.setattr(mapped_matrix.MatrixSource, "load", lambda self: mapped.append(self.offset) or real_load(self))
    out_path = tmp_path / "out.bin"
    if direct:
        with direct_or_skip(out_path, 0, block_bytes=BLOCK) as out:
            crcs = stream.append(out, pieces, checksums=True)
    else:
        with open(out_path, "wb") as out:
            crcs = stream.append(out, pieces, checksums=True)
    assert sorted(mapped) == offsets
    expected = [np.ascontiguousarray(matrix.T).tobytes() for matrix in matrices]
    assert out_path.read_bytes() == b"h" * lead + b"".join(expected)
    assert crcs == [crc32c.value(data) for data in expected]


def test_a_failure_on_the_checksum_thread_is_raised_not_lost(tmp_path, monkeypatch):
    """A checksum step that fails on its thread (whose results nobody reads; a block's reuse only
    waits for them) stops the write with its error once the file is written, instead of leaving
    a wrong CRC32C in silence."""
    def failing(self, data):
        raise RuntimeError("checksum step failed")

    monkeypatch.setattr(stream._Sink, "_extend", failing)
    tensor = ArrayTensor(np.ones(3, np.float32), FLOAT32)
    with pytest.raises(RuntimeError, match="checksum step failed"):
        with direct_or_skip(tmp_path / "out.bin", 0, block_bytes=BLOCK) as out:
            stream.append(out, [("t", FLOAT32, (3,), tensor)], checksums=True)


def test_a_reserved_size_longer_than_written_is_cut_to_what_was_written(tmp_path):
    out_path = tmp_path / "out.bin"
    with direct_or_skip(out_path, 10 * BLOCK, block_bytes=BLOCK) as out:
        out.write(b"x" * (BLOCK + 5))
    assert out_path.read_bytes() == b"x" * (BLOCK + 5)


def test_a_source_shorter_than_its_span_is_bad_input_naming_it(tmp_path, source):
    source_path, _ = source
    with pytest.raises(BadInput, match=r"source\.bin.*ends before byte"):
        with direct_or_skip(tmp_path / "out.bin", 0, block_bytes=BLOCK) as out:
            out.copy_from(source_path, SOURCE_BYTES - 10, 20)
    assert not [t for t in threading.enumerate() if t.name.startswith("bertconv-write")], \
        "a writer thread outlived the output"


def test_an_error_while_writing_waits_for_the_writes_in_flight_and_closes(tmp_path):
    out = direct_or_skip(tmp_path / "out.bin", 0, block_bytes=BLOCK)
    with pytest.raises(RuntimeError, match="the caller failed"):
        with out:
            out.write(b"y" * (3 * BLOCK))  # blocks in flight when the error comes
            raise RuntimeError("the caller failed")
    with pytest.raises(OSError):
        os.fstat(out.fileno())  # closed
    assert not [t for t in threading.enumerate() if t.name.startswith("bertconv-write")]


def test_a_file_system_refusing_an_aligned_direct_write_gets_buffered_writes(tmp_path, monkeypatch):
    """EINVAL from an O_DIRECT write (a device wanting larger alignment): the descriptor drops
    O_DIRECT and the same bytes are written through the page cache."""
    real_pwritev = os.pwritev
    refused = []

    def refuse_direct(fd, buffers, offset):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", refuse_direct)
    out_path = tmp_path / "out.bin"
    data = os.urandom(3 * BLOCK + 7)
    with direct_or_skip(out_path, 0, block_bytes=BLOCK) as out:
        out.write(data)
    assert refused and out_path.read_bytes() == data


def test_open_output_falls_back_to_a_buffered_file(tmp_path, monkeypatch):
    small = open_output(tmp_path / "small.bin", direct_output.DIRECT_MIN_BYTES - 1)
    with small:
        assert not isinstance(small, DirectOutput)

    def no_direct(*args, **kwargs):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(direct_output, "DirectOutput", no_direct)
    refused = open_output(tmp_path / "large.bin", direct_output.DIRECT_MIN_BYTES)
    with refused:
        refused.write(b"z")
    assert (tmp_path / "large.bin").read_bytes() == b"z"


def test_a_safetensors_file_written_direct_leaves_only_its_header_in_the_page_cache(tmp_path, monkeypatch):
    with direct_or_skip(tmp_path / "probe.bin"):
        pass
    values = np.arange(3 * BLOCK, dtype=np.float32).reshape(3, -1)
    tensors = [("a", FLOAT32, values.shape, lambda: values), ("b", FLOAT32, (7,), lambda: values[0, :7].copy())]
    buffered, direct = tmp_path / "buffered.safetensors", tmp_path / "direct.safetensors"
    safetensors_file.write_file(buffered, tensors)
    assert resident_bytes(buffered) > 0  # a buffered write leaves its pages cached: the measure sees them
    monkeypatch.setattr(direct_output, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(direct_output, "BLOCK_BYTES", BLOCK)
    safetensors_file.write_file(direct, tensors)
    assert resident_bytes(direct) <= mmap.PAGESIZE, "the tensors went through the page cache"  # the header's, read back
    assert direct.read_bytes() == buffered.read_bytes()


def test_the_bytes_to_read_back_are_cached_once_written_and_no_others(tmp_path):
    """The pages of `write(..., read_back=True)` bytes, in a block written whole, across a block's
    end and in the last block, are read into the page cache after their writes; no other page is."""
    page = mmap.PAGESIZE
    path = tmp_path / "out.bin"
    spans, written = [], []
    with direct_or_skip(path, block_bytes=BLOCK) as out:
        for nbytes, read_back in ((10, True), (3 * BLOCK - 110, False), (5000, True), (2 * BLOCK, False), (1, True)):
            if read_back:
                spans.append((out.tell(), out.tell() + nbytes))
            written.append(os.urandom(nbytes))
            out.write(written[-1], read_back=read_back)
    expected = {index for start, end in spans for index in range(start // page, -(-end // page))}
    assert len(expected) < len(resident_pages(path)) // 2  # the test would see pages cached that should not be
    for _ in range(500):  # the kernel reads them in the background
        cached = {index for index, resident in enumerate(resident_pages(path)) if resident}
        if cached >= expected:
            break
        time.sleep(0.01)
    assert cached == expected
    assert path.read_bytes() == b"".join(written)  # the last page read in before the file was cut to length


def forced_direct(monkeypatch) -> list[Path]:
    """Every output goes direct (however small, in BLOCK-sized blocks) from here on; the list
    the paths of the DirectOutputs opened fill in."""
    monkeypatch.setattr(direct_output, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(direct_output, "BLOCK_BYTES", BLOCK)
    opened = []
    real_init = DirectOutput.__init__
    monkeypatch.setattr(DirectOutput, "__init__", lambda self, *a, **k: opened.append(a[0]) or real_init(self, *a, **k))
    return opened


@pytest.mark.parametrize("fixture", [FIXTURES / "hf" / "masked_lm", FIXTURES / "tf" / "full" / "bert_model.ckpt"])
def test_a_conversion_written_direct_is_byte_identical(fixture, tmp_path, monkeypatch):
    """Kernel-copied spans (Hugging Face) and loaded, transposed arrays (TF) alike."""
    with direct_or_skip(tmp_path / "probe.bin"):
        pass
    buffered, direct = tmp_path / "buffered", tmp_path / "direct"
    convert(formats.read(fixture), buffered, "hf")
    opened = forced_direct(monkeypatch)
    convert(formats.read(fixture), direct, "hf")
    assert len(opened) == 1
    assert (direct / "model.safetensors").read_bytes() == (buffered / "model.safetensors").read_bytes()


@pytest.mark.parametrize("kernel_copy", ["absent", "refused"])
def test_a_copy_the_kernel_cannot_make_is_made_by_reading(kernel_copy, tmp_path, monkeypatch):
    """A small output's verbatim spans are copied by the kernel (`copy_file_range`); where the
    system has no such call (macOS) or refuses it, they are read and written, the same bytes."""
    kernel, by_hand = tmp_path / "kernel", tmp_path / "by_hand"
    convert(formats.read(FIXTURES / "hf" / "masked_lm"), kernel, "hf")
    without_system_call(monkeypatch, "copy_file_range", kernel_copy, errno.EXDEV)
    convert(formats.read(FIXTURES / "hf" / "masked_lm"), by_hand, "hf")
    assert (by_hand / "model.safetensors").read_bytes() == (kernel / "model.safetensors").read_bytes()


@pytest.mark.parametrize("fixture, target", [*((FIXTURES / "hf" / "masked_lm", target)
                                                 for target in ("hf", "tf", "hf-flax", "hf-tf", "bert4keras", "onnx")),
                                               (FIXTURES / "keras_hub" / "bert", "keras-hub")])
def test_every_target_writes_its_tensors_direct_and_the_same_bytes(fixture, target, tmp_path, monkeypatch):
    """Every writer streams its tensor data through `open_output`: each file holding tensors goes
    past the page cache once large (forced here), with the bytes a buffered write gives."""
    with direct_or_skip(tmp_path / "probe.bin"):
        pass
    buffered, direct = tmp_path / "buffered", tmp_path / "direct"
    convert(formats.read(fixture), buffered, target)
    opened = forced_direct(monkeypatch)
    convert(formats.read(fixture), direct, target)
    written = sorted(p.relative_to(buffered) for p in buffered.rglob("*") if p.is_file())
    largest = max(written, key=lambda name: (buffered / name).stat().st_size)
    assert largest.name in [p.name for p in opened]  # opened in the temporary sibling renamed to `direct`
    for name in written:
        assert (direct / name).read_bytes() == (buffered / name).read_bytes(), name


@pytest.mark.parametrize("target", ["tf", "bert4keras", "hf"])
def test_a_tf_bundles_tensors_are_copied_with_their_checksums_checked(target, tmp_path, monkeypatch):
    """A TF bundle's tensors are not loaded as arrays: those stored as the target stores them are
    copied into the staging blocks, those it stores transposed (bert4keras' NSP kernel, every
    Hugging Face kernel) are mapped and transposed from the map, and either way their CRC32C is
    checked on the bytes used, as reading them checks it: the same bytes as a buffered conversion's."""
    buffered, direct = tmp_path / "buffered", tmp_path / "direct"
    convert(formats.read(TF_FULL), buffered, target)
    forced_direct(monkeypatch)
    loaded, read = [], bundle.BundleTensor.read
    monkeypatch.setattr(bundle.BundleTensor, "read", lambda self: loaded.append(self.name) or read(self))
    convert(formats.read(TF_FULL), direct, target)
    assert loaded == []
    for name in sorted(p.relative_to(buffered) for p in buffered.rglob("*") if p.is_file()):
        assert (direct / name).read_bytes() == (buffered / name).read_bytes(), name


@pytest.mark.parametrize("target, direct", [("tf", True), ("hf", True), ("hf", False)],
                         ids=["copied", "transposed", "transposed, buffered"])
def test_a_copied_tf_tensor_that_fails_its_checksum_stops_the_conversion(target, direct, tmp_path, monkeypatch):
    """A byte flipped in a tensor copied or transposed from its map: BadInput naming the data
    file, the tensor and the index, as reading it would; nothing is left at the destination."""
    source = tmp_path / "tf"
    shutil.copytree(TF_FULL.parent, source)
    reader = bundle.BundleReader(source / TF_FULL.name)
    entry = reader.entries["bert/encoder/layer_0/output/dense/kernel"]
    data_file = source / f"{TF_FULL.name}.data-00000-of-00001"
    data = bytearray(data_file.read_bytes())
    data[entry.offset + entry.size // 2] ^= 0x40
    data_file.write_bytes(bytes(data))
    if direct:
        forced_direct(monkeypatch)
    with pytest.raises(BadInput, match=r"data-00000-of-00001: tensor 'bert/encoder/layer_0/output/dense/"
                                       r"kernel': crc32c of bytes .* the index .* says"):
        convert(formats.read(source / TF_FULL.name), tmp_path / "out", target)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["tf", "hf"], ids=["copied", "transposed"])
def test_a_missing_or_short_data_file_is_named_when_its_tensors_are_copied_or_mapped(target, tmp_path, monkeypatch):
    """A bundle whose data file is gone or cut short, its tensors copied into staging blocks or
    mapped for their transposes: BadInput naming the data file, the tensor and the index, as
    reading them says it (a large output said it "cannot write: No such file or directory")."""
    source = tmp_path / "tf"
    shutil.copytree(TF_FULL.parent, source)
    data_file = source / f"{TF_FULL.name}.data-00000-of-00001"
    forced_direct(monkeypatch)
    data_file.unlink()
    with pytest.raises(BadInput, match=r"missing data file \(shard 0\) holding tensor .* listed in .*\.index"):
        convert(formats.read(source / TF_FULL.name), tmp_path / "out", target)
    data_file.write_bytes((TF_FULL.parent / data_file.name).read_bytes()[:1000])
    with pytest.raises(BadInput, match=r"data-00000-of-00001: tensor .* claims bytes .*, but the file has 1000"):
        convert(formats.read(source / TF_FULL.name), tmp_path / "out", target)
    assert not (tmp_path / "out").exists()


def test_an_interrupted_direct_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    """Ctrl-C while blocks are in flight: the writes are waited for, the descriptor closed, and
    the partial output removed, as for a buffered one."""
    with direct_or_skip(tmp_path / "probe.bin"):
        pass
    (tmp_path / "probe.bin").unlink()
    opened, copies = forced_direct(monkeypatch), []
    real_preadv = os.preadv

    def interrupted(fd, buffers, offset):
        if opened:
            copies.append(offset)
            if len(copies) == 5:
                raise KeyboardInterrupt
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert(formats.read(FIXTURES / "hf" / "masked_lm"), tmp_path / "out", "hf")
    assert opened and len(copies) == 5
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("bertconv-write")]


@pytest.mark.parametrize("fixture", [FIXTURES / "hf" / "masked_lm", FIXTURES / "tf" / "full" / "bert_model.ckpt"])
def test_a_tf_bundle_written_direct_is_byte_identical(fixture, tmp_path, monkeypatch):
    """The bundle's data file goes through `open_output` (O_DIRECT past DIRECT_MIN_BYTES, here
    forced for a small fixture) and holds the same bytes as one written through the page cache."""
    buffered, direct = tmp_path / "buffered", tmp_path / "direct"
    convert(formats.read(fixture), buffered, "tf")
    opened = forced_direct(monkeypatch)
    convert(formats.read(fixture), direct, "tf")
    assert [p.name for p in opened] == ["bert_model.ckpt.data-00000-of-00001"]
    for name in ("bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"):
        assert (direct / name).read_bytes() == (buffered / name).read_bytes()


def test_a_staging_block_waits_for_the_checksums_of_its_bytes(tmp_path, monkeypatch):
    """A TF bundle's CRC32Cs are taken on a thread of their own over the staging blocks; with
    that thread slowed down, the blocks must still not be refilled before it has read them
    (a Hugging Face source: its spans are copied into the blocks, its kernels transposed there)."""
    from bertconv.containers import stream

    buffered, direct = tmp_path / "buffered", tmp_path / "direct"
    fixture = FIXTURES / "hf" / "masked_lm"
    convert(formats.read(fixture), buffered, "tf")
    forced_direct(monkeypatch)
    real_extend = stream._Sink._extend

    def slow_extend(self, data):
        threading.Event().wait(0.001)
        real_extend(self, data)

    monkeypatch.setattr(stream._Sink, "_extend", slow_extend)
    convert(formats.read(fixture), direct, "tf")
    assert (direct / "bert_model.ckpt.index").read_bytes() == (buffered / "bert_model.ckpt.index").read_bytes()


def _resident_kib_of_mapping(path: Path) -> int:
    """This process's resident KiB of its memory maps of `path` (/proc/self/smaps)."""
    resident, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            resident += int(fields[1])
    return resident


def _skip_unless_pages_can_be_mapped_in_and_seen() -> None:
    """Skip the test where a mapping's resident pages cannot be seen (/proc/self/smaps) or the
    kernel has no MADV_POPULATE_READ and MADV_POPULATE_WRITE (Linux 5.14)."""
    if not Path("/proc/self/smaps").exists():
        pytest.skip("no /proc/self/smaps to see a mapping's resident pages")
    release = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    if release < (5, 14):
        pytest.skip(f"Linux {os.uname().release} has no MADV_POPULATE_READ nor _WRITE (5.14)")


def test_the_loader_maps_in_a_mapped_tensors_pages(tmp_path):
    """`advice.populate` (what the loader thread does to each array it hands over) maps in the
    pages of a memory-mapped tensor, so that the writer's transpose does not fault them in."""
    from bertconv.containers import advice
    from bertconv.tensor import MappedTensor

    _skip_unless_pages_can_be_mapped_in_and_seen()
    path = tmp_path / "tensor.bin"
    path.write_bytes(np.arange(256 * 1024, dtype=np.float32).tobytes())  # 1 MiB, in the page cache
    array = MappedTensor(path, 0, FLOAT32, (512, 512)).read()
    before = _resident_kib_of_mapping(path)
    advice.populate(array)
    assert (before, _resident_kib_of_mapping(path)) == (0, 1024)


@pytest.mark.parametrize("view", [lambda a: a[256:], lambda a: a[::-1][:128], lambda a: a[:, ::2][100:101],
                                  lambda a: a[:0]])
def test_the_loader_maps_in_the_pages_a_view_spans(tmp_path, monkeypatch, view):
    """A view of part of a mapped tensor (a slice, reversed, strided) has just the pages it spans
    mapped in: madvise is asked for the page-aligned span NumPy's `byte_bounds` gives, nothing
    for an empty view. (The kernel's answer is not compared: it maps in the page cache's
    neighbouring pages too, as many as its fault-around and folios happen to give.)"""
    from bertconv.containers import advice
    from bertconv.tensor import MappedTensor

    byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds
    asked = []
    monkeypatch.setattr(advice, "_libc_madvise", lambda: lambda start, length, how: asked.append((start, length, how)))
    path = tmp_path / "tensor.bin"
    path.write_bytes(np.arange(256 * 1024, dtype=np.float32).tobytes())  # rows of 2 KiB, two to a page
    array = view(MappedTensor(path, 0, FLOAT32, (512, 512)).read())
    advice.populate(array)
    if array.size == 0:
        assert asked == []
        return
    low, high = byte_bounds(array)
    start = low - low % mmap.PAGESIZE
    assert asked == [(start, high - start, 22)]  # MADV_POPULATE_READ


def _faults_of_this_thread() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def test_the_staging_blocks_after_the_first_are_mapped_in_by_the_writer_threads(tmp_path, monkeypatch):
    """While the first staging block fills (faulting its pages in as it is written: mapping them in
    first costs the filling thread as much), the idle writer threads map in the others, so that the
    thread filling them does not fault their pages in one by one."""
    populated = []
    monkeypatch.setattr(direct_output, "populate_for_writing",
                        lambda block: populated.append((id(block), threading.current_thread().name)))
    with DirectOutput(tmp_path / "out", 0, block_bytes=1 << 20):
        pass  # leaving waits for the writer threads
    assert len({block for block, _ in populated}) == len(populated) == direct_output.WRITERS
    assert all(thread.startswith("bertconv-write") for _, thread in populated)


def test_populate_for_writing_maps_in_every_page_of_an_anonymous_map():
    from bertconv.containers import advice

    _skip_unless_pages_can_be_mapped_in_and_seen()
    region = mmap.mmap(-1, 1 << 20)
    advice.populate_for_writing(region)
    before = _faults_of_this_thread()
    memoryview(region)[::mmap.PAGESIZE] = bytes(len(region) // mmap.PAGESIZE)
    assert _faults_of_this_thread() - before < 16  # not mapped in: a fault per page, 256
