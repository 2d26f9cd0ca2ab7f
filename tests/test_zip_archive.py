"""bertconv's own zip reader (`containers/zip_archive.py`) answers as `zipfile` does, for the
archives it reads, and leaves every other one to `zipfile`."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest
import torch

from bertconv.containers import torch_pickle, zip_archive
from conftest import FIXTURES

TORCH_FILES = sorted(path for suffix in ("*.bin", "*.pt", "*.pth") for path in FIXTURES.rglob(suffix)
                     if zipfile.is_zipfile(path))


def assert_read_as_zipfile_reads(path: Path) -> None:
    """Every member's name, sizes, offset and method, and every member's bytes, as zipfile's."""
    with zipfile.ZipFile(path) as expected, zip_archive.Archive(path) as archive:
        fields = ("filename", "file_size", "compress_size", "header_offset", "compress_type", "CRC")
        assert [tuple(getattr(m, f) for f in fields) for m in archive.infolist()] == [
            tuple(getattr(m, f) for f in fields) for m in expected.infolist()]
        assert archive.namelist() == expected.namelist()
        for ours, theirs in zip(archive.infolist(), expected.infolist()):
            assert archive.read(ours) == expected.read(theirs)
            assert archive.read(ours.filename) == expected.read(ours.filename)


def test_the_torch_files_of_the_fixtures_are_read_as_zipfile_reads_them():
    assert len(TORCH_FILES) >= 5
    for path in TORCH_FILES:
        assert_read_as_zipfile_reads(path)


def test_a_file_torch_saves_now_is_read_by_bertconv_s_reader(tmp_path):
    """What torch 2 writes (miniz: data descriptors, UTF-8 names, 64-byte aligned storages) is
    read here, not left to zipfile."""
    path = tmp_path / "pytorch_model.bin"
    torch.save({"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4, dtype=torch.float16)}, path)
    assert isinstance(zip_archive.open_archive(path), zip_archive.Archive)
    assert_read_as_zipfile_reads(path)


def _as_zip64(source: Path, destination: Path) -> None:
    """`source`'s archive as a writer spells it past 4 GiB: every central directory entry's sizes
    and offset in a ZIP64 extra field (their 32-bit fields 0xFFFFFFFF), and the directory's count,
    size and offset in a ZIP64 end record and its locator (the end record's fields all ones)."""
    data = source.read_bytes()
    end = struct.unpack("<4s4H2LH", data[-22:])
    directory_at, directory_size = end[6], end[5]
    entries, pos = [], directory_at
    while pos < directory_at + directory_size:
        fixed = list(struct.unpack_from("<4s4B4HL2L5H2L", data, pos))
        name_length, extra_length, comment_length = fixed[12:15]
        name = data[pos + 46:pos + 46 + name_length]
        extra = struct.pack("<2H3Q", 1, 24, fixed[11], fixed[10], fixed[18])
        fixed[10] = fixed[11] = fixed[18] = 0xFFFFFFFF
        fixed[13] = len(extra)
        entries.append(struct.pack("<4s4B4HL2L5H2L", *fixed) + name + extra)
        pos += 46 + name_length + extra_length + comment_length
    directory = b"".join(entries)
    record_at = directory_at + len(directory)
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, end[3], end[4], len(directory), directory_at)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, record_at, 1)
    tail = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    destination.write_bytes(data[:directory_at] + directory + record + locator + tail)


def test_zip64_records_and_extra_fields_are_read(tmp_path):
    torch.save({"a": torch.arange(6.0), "b": torch.zeros(3)}, tmp_path / "small.bin")
    _as_zip64(tmp_path / "small.bin", tmp_path / "zip64.bin")
    assert isinstance(zip_archive.open_archive(tmp_path / "zip64.bin"), zip_archive.Archive)
    assert_read_as_zipfile_reads(tmp_path / "zip64.bin")
    records, spans = torch_pickle._read_zip(tmp_path / "zip64.bin")
    assert spans == torch_pickle._read_zip(tmp_path / "small.bin")[1]


def test_what_it_does_not_read_is_left_to_zipfile(tmp_path):
    """An archive comment, and a compressed member: zipfile opens the first, and reads the second
    for the reader that opened the archive; the bytes are zipfile's either way."""
    commented, deflated = tmp_path / "commented.zip", tmp_path / "deflated.zip"
    with zipfile.ZipFile(commented, "w") as archive:
        archive.writestr("archive/data.pkl", b"stored")
        archive.comment = b"a comment"
    with zipfile.ZipFile(deflated, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 1000, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr("archive/byteorder", b"little")
    assert isinstance(zip_archive.open_archive(commented), zipfile.ZipFile)
    with pytest.raises(zip_archive.Unreadable):
        zip_archive.Archive(commented)
    with zip_archive.Archive(deflated) as archive:
        assert archive.read("archive/data.pkl") == b"x" * 1000
        assert archive.read("archive/byteorder") == b"little"


@pytest.mark.parametrize("damage", ["truncated", "bad crc", "overlapping"])
def test_a_damaged_archive_is_judged_by_zipfile(damage, tmp_path):
    """What is wrong with a damaged archive is zipfile's own words, as before this reader."""
    path = tmp_path / "pytorch_model.bin"
    torch.save({"a": torch.arange(6.0)}, path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        pickle_member = archive.getinfo("pytorch_model/data.pkl")
    if damage == "truncated":
        data = data[:-30]
    elif damage == "bad crc":
        name_length, extra_length = struct.unpack_from("<2H", data, pickle_member.header_offset + 26)
        data[pickle_member.header_offset + 30 + name_length + extra_length + pickle_member.file_size // 2] ^= 0xFF
    else:  # the pickle, the first member, runs over the member after it
        directory_at = struct.unpack("<L", data[-6:-2])[0]
        struct.pack_into("<2L", data, directory_at + 20, len(data) // 2, len(data) // 2)
    path.write_bytes(bytes(data))
    with pytest.raises(Exception) as expected:
        with zipfile.ZipFile(path) as archive:
            archive.read("pytorch_model/data.pkl")
    with pytest.raises(Exception) as ours:
        torch_pickle._read_zip(path)
    assert f"{type(expected.value).__name__}: {expected.value}" in str(ours.value)


def test_a_member_claiming_bytes_past_the_directory_is_left_to_zipfile(tmp_path):
    """A stored size of 2 GiB in a small file: no read of this reader may ask for more bytes than
    the file holds, so the archive goes to zipfile (which reads the member's own size, and so the
    same state dict)."""
    path = tmp_path / "pytorch_model.bin"
    torch.save({"a": torch.arange(6.0)}, path)
    expected = torch_pickle._read_zip(path)
    data = bytearray(path.read_bytes())
    directory_at = struct.unpack("<L", data[-6:-2])[0]
    struct.pack_into("<L", data, directory_at + 20, 2**31)  # the first member's compressed size
    path.write_bytes(bytes(data))
    with zip_archive.open_archive(path) as archive:
        assert isinstance(archive, zipfile.ZipFile)
    assert torch_pickle._read_zip(path)[1] == expected[1]
