"""TensorFlow tensor bundles: the pure-Python reader and writer against TensorFlow itself.

Fixtures are in fixtures/tf/ (made by fixtures/make_tf_fixtures.py). Tests that need TensorFlow
take the `tf` fixture, which skips them when TensorFlow is not installed.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bertconv import dtypes
from bertconv.containers.tensorflow import protowire as pw
from bertconv.containers.tensorflow import bundle as tb, bundle_write as tbw, prefix as tf_prefix, sstable
from bertconv.errors import BadInput
from conftest import real_file
from fuzzing import sstable_blocks

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tf"
FIXTURE_NAMES = ["full", "two_shards", "fp16", "bf16", "encoder_only", "snappy"]
SAVER_FIXTURES = ["full", "fp16", "bf16", "encoder_only"]  # one shard, written by a TF1 Saver
PREFIX_NAME = "bert_model.ckpt"
# (file, entries, float parameters) from FORMATS.md "Real checkpoints in shared/real/"
REAL_INDEXES = [
    ("google-bert-medium-uncased.ckpt.index", 142, 41_668_412),
    ("chinese-bert-wwm.ckpt.index", 207, 102_882_442),
]


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def fixture_prefix(name: str) -> Path:
    return FIXTURES / name / PREFIX_NAME


def copy_bundle(name: str, destination: Path) -> Path:
    """A writable copy of fixture `name` in `destination`; returns its prefix."""
    for file in (FIXTURES / name).glob(f"{PREFIX_NAME}.*"):
        shutil.copy(file, destination / file.name)
    return destination / PREFIX_NAME


def source(name: str, dtype: dtypes.DType, array: np.ndarray):
    return (name, dtype, tuple(array.shape), lambda: array)


def sources_of(reader: tb.BundleReader) -> list:
    return [(name, e.dtype, e.shape, (lambda name=name: reader.tensor(name).read()))
            for name, e in reader.entries.items()]


def tf_values(tf, prefix: Path) -> dict[str, np.ndarray]:
    """Every tensor of a bundle as TensorFlow reads it; bfloat16 as its uint16 bits."""
    reader = tf.train.load_checkpoint(str(prefix))
    values = {}
    for name in reader.get_variable_to_shape_map():
        value = np.asarray(reader.get_tensor(name))
        values[name] = value.view(np.uint16) if value.dtype.name == "bfloat16" else value
    return values


# crc32c and protobuf wire format --------------------------------------------------------------

def test_crc_mask_round_trips_and_matches_leveldb():
    assert sstable.mask_crc(0) == sstable.CRC_MASK_DELTA
    rng = random.Random(0)
    for crc in [0, 1, 0xFFFFFFFF, *(rng.getrandbits(32) for _ in range(100))]:
        assert sstable.unmask_crc(sstable.mask_crc(crc)) == crc


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32 - 1, 2**63, 2**64 - 1])
def test_varint_round_trip(value):
    encoded = pw.encode_varint(value)
    assert pw.decode_varint(encoded, 0, source="f", entry="e") == (value, len(encoded))


@pytest.mark.parametrize("data, message", [
    (b"\x80\x80", "truncated varint"),
    (b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    (b"\xff" * 9 + b"\x7f", "overflows 64 bits"),
])
def test_bad_varints_are_bad_input(data, message):
    with pytest.raises(BadInput, match=message):
        pw.decode_varint(data, 0, source="some.index", entry="entry 'x'")


@pytest.mark.parametrize("data, message", [
    (pw.encode_tag(1, pw.WIRE_START_GROUP), "wire type 3"),
    (pw.encode_tag(1, pw.WIRE_END_GROUP), "wire type 4"),
    (pw.encode_tag(2, pw.WIRE_LEN) + pw.encode_varint(5) + b"abc", "claims 5 bytes, only 3 left"),
    (pw.encode_tag(6, pw.WIRE_FIXED32) + b"ab", "truncated fixed32"),
    (b"\x00\x01", "field number 0"),
    (b"\x0f", "wire type 7"),
])
def test_bad_messages_name_file_and_entry(data, message):
    with pytest.raises(BadInput, match=message) as error:
        list(pw.iter_fields(data, source="some.index", entry="entry 'w'"))
    assert "some.index" in str(error.value) and "entry 'w'" in str(error.value)


def test_fields_decode_what_encoders_write():
    message = (pw.encode_varint_field(1, 19) + pw.encode_len_field(2, b"xy")
               + pw.encode_fixed32_field(6, 0xDEADBEEF) + pw.encode_varint_field(4, -1))
    fields = list(pw.iter_fields(message, source="f", entry="e"))
    assert [(f.number, f.wire_type) for f in fields] == [(1, 0), (2, 2), (6, 5), (4, 0)]
    assert fields[0].value == 19 and bytes(fields[1].value) == b"xy" and fields[2].value == 0xDEADBEEF
    assert pw.as_int64(fields[3].value) == -1


@pytest.mark.parametrize("number", [1, 15, 16, 300, 2**29 - 1])
@pytest.mark.parametrize("value", [0, 127, 128, 300, 2**63, 2**64 - 1])
def test_one_and_many_byte_tags_values_and_lengths_decode_alike(number, value):
    """A one-byte varint (tag, value or length) is taken without `decode_varint`; field numbers
    from 16 and values from 128 take its longer path."""
    payload = b"z" * (value % 1000)
    message = pw.encode_varint_field(number, value) + pw.encode_len_field(number, payload)
    fields = list(pw.iter_fields(message, source="f", entry="e"))
    assert [(f.number, f.wire_type) for f in fields] == [(number, pw.WIRE_VARINT), (number, pw.WIRE_LEN)]
    assert fields[0].value == value and bytes(fields[1].value) == payload
    with pytest.raises(BadInput, match="truncated varint"):  # the value cut off after its tag
        list(pw.iter_fields(pw.encode_tag(number, pw.WIRE_VARINT), source="f", entry="e"))
    with pytest.raises(BadInput, match="truncated varint"):  # the length cut off after its tag
        list(pw.iter_fields(pw.encode_tag(number, pw.WIRE_LEN), source="f", entry="e"))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_iter_fields_never_fails_otherwise(data):
    try:
        list(pw.iter_fields(data, source="f", entry="e"))
    except BadInput:
        pass


# LevelDB key shortening ----------------------------------------------------------------------

@pytest.mark.parametrize("start, limit, expected", [
    (b"the quick brown fox", b"the who", b"the r"),
    (b"abc", b"abd", b"abc"),  # c + 1 == d: nothing shorter fits
    (b"abc", b"abcd", b"abc"),  # a prefix: unchanged
    (b"a\xff", b"b", b"a\xff"),
    (b"aqqqq", b"c", b"b"),
])
def test_shortest_separator(start, limit, expected):
    separator = sstable.shortest_separator(start, limit)
    assert separator == expected and start <= separator < limit


@pytest.mark.parametrize("key, expected", [(b"h", b"i"), (b"z/kernel", b"{"), (b"\xff\xffa", b"\xff\xffb"),
                                           (b"\xff\xff", b"\xff\xff"), (b"", b"")])
def test_short_successor(key, expected):
    assert sstable.short_successor(key) == expected


# Reading fixtures and real indexes without TensorFlow ----------------------------------------

@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_reads_with_checked_crcs(name):
    reader = tb.BundleReader(fixture_prefix(name))
    assert list(reader.entries) == sorted(reader.entries, key=lambda n: n.encode())
    for entry_name, entry in reader.entries.items():
        values = reader.tensor(entry_name).read()
        assert values.shape == entry.shape and values.dtype == entry.dtype.numpy


def test_data_paths_name_each_shard_and_refuse_others():
    """Each tensor names its own shard's data file; a shard the header does not count is refused."""
    shards = tb.BundleReader(fixture_prefix("two_shards"))
    paths = {name: shards.data_path(entry.shard_id) for name, entry in shards.entries.items()}
    assert {path.name for path in paths.values()} == {"bert_model.ckpt.data-00000-of-00002",
                                                      "bert_model.ckpt.data-00001-of-00002"}
    assert all(shards.tensor(name).path == paths[name] for name in paths)
    with pytest.raises(ValueError, match="shard 2 out of range: the bundle has 2"):
        shards.data_path(2)


def test_fixture_contents():
    full = tb.BundleReader(fixture_prefix("full"))
    assert full.entries["global_step"].dtype is dtypes.INT64 and full.entries["global_step"].shape == ()
    assert full.tensor("global_step").read() == 1234
    assert full.entries["cls/seq_relationship/output_weights"].shape == (2, 32)
    assert full.entries["bert/encoder/layer_1/intermediate/dense/kernel"].shape == (32, 37)
    assert "bert/embeddings/word_embeddings/adam_m" in full.entries
    shards = tb.BundleReader(fixture_prefix("two_shards"))
    assert shards.num_shards == 2 and {e.shard_id for e in shards.entries.values()} == {0, 1}
    assert tb.BundleReader(fixture_prefix("bf16")).entries["cls/predictions/output_bias"].dtype is dtypes.BFLOAT16
    assert tb.BundleReader(fixture_prefix("fp16")).entries["cls/predictions/output_bias"].tf_dtype == 19
    encoder = tb.BundleReader(fixture_prefix("encoder_only"))
    assert not [n for n in encoder.entries if n.startswith(("cls/", "bert/pooler/"))]


def test_snappy_fixture_has_compressed_blocks():
    data = (FIXTURES / "snappy" / f"{PREFIX_NAME}.index").read_bytes()
    block_types = {data[h.offset + h.size] for h in sstable_blocks(data)}
    assert sstable.BLOCK_TYPE_SNAPPY in block_types


@pytest.mark.parametrize("file, entries, parameters", REAL_INDEXES)
def test_real_index_alone(tmp_path, file, entries, parameters):
    prefix = tmp_path / file.replace(".ckpt.index", ".ckpt")
    shutil.copy(real_file(file), f"{prefix}.index")
    reader = tb.BundleReader(prefix)
    assert len(reader.entries) == entries
    floats = [e for e in reader.entries.values() if e.dtype is dtypes.FLOAT32]
    assert sum(e.numel for e in floats) == parameters
    if "global_step" in reader.entries:
        assert reader.entries["global_step"].dtype is dtypes.INT64
    assert len(floats) + ("global_step" in reader.entries) == entries
    with pytest.raises(BadInput, match=r"data-00000-of-00001.*missing data file.*word_embeddings"):
        reader.tensor("bert/embeddings/word_embeddings").read()


# resolve_prefix ------------------------------------------------------------------------------

def test_resolve_prefix_forms(tmp_path):
    prefix = fixture_prefix("two_shards")
    assert tf_prefix.resolve_prefix(prefix) == prefix
    assert tf_prefix.resolve_prefix(f"{prefix}.index") == prefix
    assert tf_prefix.resolve_prefix(f"{prefix}.data-00001-of-00002") == prefix
    assert tf_prefix.resolve_prefix(prefix.parent) == prefix  # via the `checkpoint` state file
    copied = copy_bundle("encoder_only", tmp_path)  # no state file: the only *.index
    assert tf_prefix.resolve_prefix(tmp_path) == copied


def test_resolve_prefix_state_file_from_another_machine(tmp_path):
    copied = copy_bundle("fp16", tmp_path)
    shutil.copy(fixture_prefix("bf16").with_name(f"{PREFIX_NAME}.index"), tmp_path / "other.ckpt.index")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/home/someone/run7/bert_model.ckpt"\n')
    assert tf_prefix.resolve_prefix(tmp_path) == copied


def test_resolve_prefix_errors(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        tf_prefix.resolve_prefix(tmp_path / "nothing.ckpt")
    with pytest.raises(BadInput, match="no TensorFlow checkpoint here"):
        tf_prefix.resolve_prefix(tmp_path)
    for stem in ("a.ckpt", "b.ckpt"):
        shutil.copy(fixture_prefix("fp16").with_name(f"{PREFIX_NAME}.index"), tmp_path / f"{stem}.index")
    with pytest.raises(BadInput, match=r"holds 2 checkpoints \(a\.ckpt\.index, b\.ckpt\.index\)"):
        tf_prefix.resolve_prefix(tmp_path)
    (tmp_path / "vocab.txt").write_text("x\n")
    with pytest.raises(BadInput, match="not a TensorFlow checkpoint"):
        tf_prefix.resolve_prefix(tmp_path / "vocab.txt")


# Errors --------------------------------------------------------------------------------------

def test_truncated_index(tmp_path):
    prefix = copy_bundle("encoder_only", tmp_path)
    index = Path(f"{prefix}.index")
    data = index.read_bytes()
    index.write_bytes(data[:30])
    with pytest.raises(BadInput, match=r"\.index: truncated index: the file has 30 bytes"):
        tb.BundleReader(prefix)
    index.write_bytes(data[200:])  # footer intact, blocks cut off at the front
    with pytest.raises(BadInput, match=r"\.index: truncated index: .*past end of file"):
        tb.BundleReader(prefix)


def test_an_index_is_parsed_once_however_often_it_is_opened(tmp_path, monkeypatch):
    """Telling formats apart opens a bundle's index several times: one parse serves them all."""
    from bertconv import formats

    prefix = copy_bundle("full", tmp_path)
    parses = []
    real_read_table = tb.read_table
    monkeypatch.setattr(tb, "read_table", lambda *args: parses.append(args[1]) or real_read_table(*args))
    tb._parse_index.cache_clear()
    formats.read(prefix)
    assert parses == [Path(f"{prefix}.index")]


def test_an_index_rewritten_in_place_is_parsed_again(tmp_path):
    """Same size, same timestamps, other bytes: the reader parses the new bytes (and finds their
    checksum wrong) instead of answering from the parse of the old ones."""
    prefix = copy_bundle("encoder_only", tmp_path)
    index = Path(f"{prefix}.index")
    tb.BundleReader(prefix)
    stat = index.stat()
    data = bytearray(index.read_bytes())
    data[40] ^= 0x01
    index.write_bytes(bytes(data))
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(BadInput, match=r"corrupt index: data block"):
        tb.BundleReader(prefix)


def test_wrong_magic(tmp_path):
    prefix = copy_bundle("encoder_only", tmp_path)
    index = Path(f"{prefix}.index")
    index.write_bytes(index.read_bytes()[:-1] + b"\x00")
    with pytest.raises(BadInput, match=r"\.index: bad magic 0x00.* expected 0xdb4775248b80fb57"):
        tb.BundleReader(prefix)


def test_flipped_byte_in_block_fails_its_crc(tmp_path):
    prefix = copy_bundle("encoder_only", tmp_path)
    index = Path(f"{prefix}.index")
    data = bytearray(index.read_bytes())
    data[40] ^= 0x01
    index.write_bytes(bytes(data))
    with pytest.raises(BadInput, match=r"\.index: corrupt index: data block .* has crc32c 0x[0-9a-f]{8}, "
                                       r"its trailer says"):
        tb.BundleReader(prefix)


def test_missing_shard_is_reported_on_read_only(tmp_path):
    prefix = copy_bundle("two_shards", tmp_path)
    Path(f"{prefix}.data-00001-of-00002").unlink()
    reader = tb.BundleReader(prefix)  # the index alone is fine
    on_shard_1 = next(n for n, e in reader.entries.items() if e.shard_id == 1)
    on_shard_0 = next(n for n, e in reader.entries.items() if e.shard_id == 0)
    reader.tensor(on_shard_0).read()
    with pytest.raises(BadInput, match=rf"data-00001-of-00002: missing data file .*{on_shard_1}"):
        reader.tensor(on_shard_1).read()


def test_entry_past_end_of_data_file(tmp_path):
    prefix = copy_bundle("encoder_only", tmp_path)
    data_file = Path(f"{prefix}.data-00000-of-00001")
    data_file.write_bytes(data_file.read_bytes()[:1000])
    reader = tb.BundleReader(prefix)
    last = max(reader.entries.values(), key=lambda e: e.offset)
    with pytest.raises(BadInput, match=rf"data-00000-of-00001: tensor '{last.name}' claims bytes "
                                       rf"{last.offset}\.\.{last.offset + last.size}, but the file has 1000"):
        reader.tensor(last.name).read()


def test_data_crc_mismatch_names_the_tensor(tmp_path):
    prefix = copy_bundle("encoder_only", tmp_path)
    reader = tb.BundleReader(prefix)
    entry = reader.entries["bert/encoder/layer_0/output/dense/kernel"]
    data_file = Path(f"{prefix}.data-00000-of-00001")
    data = bytearray(data_file.read_bytes())
    data[entry.offset + entry.size // 2] ^= 0x40
    data_file.write_bytes(bytes(data))
    with pytest.raises(BadInput, match=r"data-00000-of-00001: tensor 'bert/encoder/layer_0/output/dense/"
                                       r"kernel': crc32c of bytes .* the index .* says"):
        reader.tensor(entry.name).read()


def test_string_entries_are_not_numeric_tensors(tmp_path):
    prefix = tmp_path / "s.ckpt"
    string = b"graph bytes \x00\xff"
    length = pw.encode_varint(len(string))
    length_crc = sstable.crc32c.value(len(string).to_bytes(4, "little"))
    checksum = sstable.mask_crc(length_crc).to_bytes(4, "little")
    payload = length + checksum + string
    crc = sstable.crc32c.extend(sstable.crc32c.extend(length_crc, checksum), string)
    Path(f"{prefix}.data-00000-of-00001").write_bytes(payload)
    with open(f"{prefix}.index", "wb") as file:
        table = sstable.TableBuilder(file, block_size=sstable.TF_BLOCK_SIZE, compress=False)
        table.add(b"", tbw.encode_header())
        table.add(b"graph", tbw.encode_entry(tb.DT_STRING, (), shard_id=0, offset=0, size=len(payload),
                                            crc32c_value=crc))
        table.finish()
    reader = tb.BundleReader(prefix)
    assert reader.entries["graph"].dtype is None and reader.read_string_scalar("graph") == string
    with pytest.raises(BadInput, match="DT_STRING .*read_string_scalar"):
        reader.tensor("graph")
    with pytest.raises(BadInput, match="no tensor named 'nope'"):
        reader.tensor("nope")


def _index_with_header(prefix: Path, header: bytes) -> None:
    with open(f"{prefix}.index", "wb") as file:
        table = sstable.TableBuilder(file, block_size=sstable.TF_BLOCK_SIZE, compress=False)
        table.add(b"", header)
        table.finish()


@pytest.mark.parametrize("header, message", [
    (pw.encode_varint_field(1, 1) + pw.encode_varint_field(2, 1), "big-endian machine"),
    (pw.encode_varint_field(1, 0), "num_shards is 0"),
    (pw.encode_varint_field(1, 1) + pw.encode_len_field(3, pw.encode_varint_field(2, 2)),
     "needs a reader of version 2"),
    (pw.encode_varint_field(1, 1) + pw.encode_len_field(3, pw.encode_varint_field(3, 1)),
     "disallows readers of version 1"),
])
def test_headers_refused(tmp_path, header, message):
    _index_with_header(tmp_path / "h", header)
    with pytest.raises(BadInput, match=message):
        tb.BundleReader(tmp_path / "h")


def test_tensorflow_header_is_what_we_write(tmp_path):
    _index_with_header(tmp_path / "h", tbw.encode_header())
    header = tb.BundleReader(tmp_path / "h").header
    assert (header.num_shards, header.endianness, header.producer, header.min_consumer) == (1, 0, 1, 0)
    assert tbw.encode_header() == bytes.fromhex("0801 1a02 0801")


# Writing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAVER_FIXTURES)
def test_writer_reproduces_saver_fixture_bytes(tmp_path, name):
    reader = tb.BundleReader(fixture_prefix(name))
    tbw.write_bundle(tmp_path / PREFIX_NAME, sources_of(reader))
    for suffix in (".index", ".data-00000-of-00001"):
        ours = (tmp_path / f"{PREFIX_NAME}{suffix}").read_bytes()
        assert ours == (FIXTURES / name / f"{PREFIX_NAME}{suffix}").read_bytes(), suffix


def test_writer_streams_in_sorted_order_one_tensor_at_a_time(tmp_path):
    calls, live = [], []

    def loader(name):
        def load():
            calls.append(name)
            live.append(name)
            return np.full((3,), len(name), np.float32)
        return load

    names = ["b/x", "a", "c", "a/b"]
    tbw.write_bundle(tmp_path / "m", [(n, dtypes.FLOAT32, (3,), loader(n)) for n in names])
    assert calls == sorted(names)
    assert list(tb.BundleReader(tmp_path / "m").entries) == sorted(names)


def test_writer_normalizes_layout_and_byte_order(tmp_path):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    transposed = base.T  # a strided view
    big_endian = base.astype(">f4")
    memmap_path = tmp_path / "raw.bin"
    base.tofile(memmap_path)
    mapped = np.memmap(memmap_path, dtype="<f4", mode="r", shape=(3, 4))
    tbw.write_bundle(tmp_path / "m", [source("t", dtypes.FLOAT32, transposed), source("b", dtypes.FLOAT32, big_endian),
                                     source("m", dtypes.FLOAT32, mapped)])
    reader = tb.BundleReader(tmp_path / "m")
    np.testing.assert_array_equal(reader.tensor("t").read(), base.T)
    np.testing.assert_array_equal(reader.tensor("b").read(), base)
    np.testing.assert_array_equal(reader.tensor("m").read(), base)


def test_writer_refuses_mismatches(tmp_path):
    with pytest.raises(ValueError, match=r"a: source gave float32 \[3\], planned float32 \[2\]"):
        tbw.write_bundle(tmp_path / "m", [("a", dtypes.FLOAT32, (2,), lambda: np.zeros(3, np.float32))])
    with pytest.raises(ValueError, match=r"a: source gave float32 \[2\], planned float16 \[2\]"):
        tbw.write_bundle(tmp_path / "m", [("a", dtypes.FLOAT16, (2,), lambda: np.zeros(2, np.float32))])
    with pytest.raises(ValueError, match="appears twice"):
        tbw.write_bundle(tmp_path / "m", [source("a", dtypes.FLOAT32, np.zeros(1, np.float32))] * 2)


@pytest.mark.parametrize("compress", [False, True])
def test_small_blocks_round_trip(tmp_path, compress):
    rng = np.random.default_rng(3)
    values = {f"layer_{i}/weights/kernel": rng.standard_normal((i % 5, 3)).astype(np.float32) for i in range(120)}
    tbw.write_bundle(tmp_path / "m", [source(n, dtypes.FLOAT32, v) for n, v in values.items()],
                    compress=compress, block_size=256)
    reader = tb.BundleReader(tmp_path / "m")
    assert reader.entries.keys() == values.keys()
    for name, value in values.items():
        np.testing.assert_array_equal(reader.tensor(name).read(), value)


def test_hostile_prefix_compression_is_refused_quickly(tmp_path):
    """A 1000-byte key repeated by 100000 three-byte entries would rebuild 100 MB of keys."""
    key_entry = pw.encode_varint(0) + pw.encode_varint(1000) + pw.encode_varint(0) + b"k" * 1000
    repeat = pw.encode_varint(1000) + pw.encode_varint(0) + pw.encode_varint(0)
    block = key_entry + repeat * 100_000 + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    crc = sstable.crc32c.extend(sstable.crc32c.value(block), b"\0")
    trailer = b"\0" + sstable.mask_crc(crc).to_bytes(4, "little")
    handle = pw.encode_varint(0) + pw.encode_varint(len(block))
    footer = (handle + handle).ljust(sstable.FOOTER_HANDLES_SIZE, b"\0") + sstable.TABLE_MAGIC.to_bytes(8, "little")
    Path(f"{tmp_path / 'h'}.index").write_bytes(block + trailer + footer)
    started = time.monotonic()
    with pytest.raises(BadInput, match="keys expand to more than 64 times"):
        tb.BundleReader(tmp_path / "h")
    assert time.monotonic() - started < 2.0


# Against TensorFlow --------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_values_match_tensorflow(tf, name):
    prefix = fixture_prefix(name)
    expected = tf_values(tf, prefix)
    reader = tb.BundleReader(prefix)
    assert set(reader.entries) == set(expected)
    for tensor_name, value in expected.items():
        ours = reader.tensor(tensor_name).read()
        assert ours.dtype == value.dtype and ours.shape == value.shape, tensor_name
        assert ours.tobytes() == value.tobytes(), tensor_name


def _save_v2(tf, prefix: Path, items: list[tuple[str, dtypes.DType, np.ndarray, object]]) -> None:
    items = sorted(items, key=lambda item: item[0].encode())
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=[i[0] for i in items],
                      shape_and_slices=[""] * len(items), tensors=[i[3] for i in items])


def _mixed_dtype_tensors(tf):
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((5, 3)).astype(np.float32)
    f16 = rng.standard_normal((4,)).astype(np.float16)
    bf16 = tf.cast(tf.constant(rng.standard_normal((2, 3)).astype(np.float32)), tf.bfloat16)
    bf16_bits = tf.bitcast(bf16, tf.uint16).numpy()
    step = np.array(123456789, dtype=np.int64)
    i32 = np.arange(6, dtype=np.int32).reshape(2, 3)
    flags = np.array([True, False, True])
    empty = np.zeros((0, 4), np.float32)
    return [
        ("bert/embeddings/word_embeddings", dtypes.FLOAT32, f32, f32),
        ("cls/predictions/output_bias", dtypes.FLOAT16, f16, f16),
        ("bert/pooler/dense/kernel", dtypes.BFLOAT16, bf16_bits, bf16),
        ("global_step", dtypes.INT64, step, step),
        ("ids", dtypes.INT32, i32, i32),
        ("flags", dtypes.BOOL, flags, flags),
        ("empty", dtypes.FLOAT32, empty, empty),
    ]


def _many_tensors(tf, count=300, *, long_names=False):
    rng = np.random.default_rng(11)
    items = []
    for i in range(count):
        value = rng.standard_normal((i % 4 + 1,)).astype(np.float32)
        items.append((f"bert/encoder/layer_{i}/attention/self/query/kernel", dtypes.FLOAT32, value, value))
    if long_names:  # keys big enough for several data blocks (TF cuts them at 256 KiB)
        value = np.ones(1, np.float32)
        items.append(("a" + "q" * 270_000, dtypes.FLOAT32, value, value))  # separator "b"
        items.append(("m" + "w" * 600_000, dtypes.FLOAT32, value, value))  # >= 2 blocks: own block
        items.append(("zz", dtypes.FLOAT32, value, value))  # successor "{"
    return items


@pytest.mark.parametrize("case", ["mixed_dtypes", "300_tensors", "several_blocks"])
def test_writer_byte_identical_to_savev2(tf, tmp_path, case):
    items = {"mixed_dtypes": lambda: _mixed_dtype_tensors(tf),
             "300_tensors": lambda: _many_tensors(tf),
             "several_blocks": lambda: _many_tensors(tf, long_names=True)}[case]()
    _save_v2(tf, tmp_path / "tf", items)
    tbw.write_bundle(tmp_path / "ours", [source(n, d, a) for n, d, a, _ in items])
    for suffix in (".index", ".data-00000-of-00001"):
        theirs = Path(f"{tmp_path / 'tf'}{suffix}").read_bytes()
        ours = Path(f"{tmp_path / 'ours'}{suffix}").read_bytes()
        assert ours == theirs, f"{case}{suffix} differs from TensorFlow's at byte " \
                               f"{next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))}"
    if case == "several_blocks":
        data = Path(f"{tmp_path / 'ours'}.index").read_bytes()
        assert len(sstable_blocks(data)) - 2 >= 3


def test_tensorflow_reads_our_snappy_blocks(tf, tmp_path):
    items = _many_tensors(tf, 200)
    tbw.write_bundle(tmp_path / "m", [source(n, d, a) for n, d, a, _ in items], compress=True, block_size=512)
    data = Path(f"{tmp_path / 'm'}.index").read_bytes()
    types = {data[h.offset + h.size] for h in sstable_blocks(data)}
    assert sstable.BLOCK_TYPE_SNAPPY in types
    values = tf_values(tf, tmp_path / "m")
    for name, _, array, _ in items:
        assert values[name].tobytes() == array.tobytes()


def test_string_scalars_match_tensorflow(tf, tmp_path):
    text = b"object graph \x00 bytes " * 50
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "s"), tensor_names=["empty", "text"], shape_and_slices=["", ""],
                      tensors=[tf.constant(b""), tf.constant(text)])
    reader = tb.BundleReader(tmp_path / "s")
    assert reader.read_string_scalar("text") == text and reader.read_string_scalar("empty") == b""
    checkpoint = tf.train.Checkpoint(v=tf.Variable([1.0, 2.0]))
    prefix = checkpoint.write(str(tmp_path / "obj"))
    graph = tb.BundleReader(prefix).read_string_scalar("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert graph == tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")


def test_partitioned_variables_refused(tf, tmp_path):
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "p"), tensor_names=["w", "w", "b"],
                      shape_and_slices=["4 2 0,2:-", "4 2 2,2:-", ""],
                      tensors=[np.ones((2, 2), np.float32), np.zeros((2, 2), np.float32), np.float32(1)])
    with pytest.raises(BadInput, match=r"p\.index: holds slices of the partitioned variable 'w'"):
        tb.BundleReader(tmp_path / "p")
