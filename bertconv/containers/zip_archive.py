"""A zip archive's members, read by bertconv itself where it can: no `zipfile`.

`zipfile`'s import (with the shutil, bz2, lzma and threading it imports) took 4.8-8 ms of every
command on a `pytorch_model.bin`, and its directory of a BERT-large file (404 members, a ZipInfo
each) about 4 ms more. torch writes its checkpoints as plain archives (miniz's): one disk, no
archive comment, every member stored, names in UTF-8, ZIP64 records once the file is large. This
module reads exactly those (https://pkware.cachefly.net/webdocs/casestudies/APPNOTE.TXT):

    the end of central directory record (and ZIP64's locator and record), the central directory
    (sizes and offsets from ZIP64's extra field where they overflow 32 bits), a member's local
    header and its stored bytes, checked against their CRC-32

It answers through the few names of `zipfile.ZipFile` the torch reader asks (`infolist`,
`namelist`, `read`, members' `filename`, `file_size`, `header_offset`, `compress_type`), checked
as `zipfile` checks them. Anything else (another disk, a comment, a general purpose flag but
the data descriptor's and UTF-8's, a member overrunning the next, a name zipfile may spell
otherwise, any inconsistency) is left to `zipfile` (`open_archive`; `Archive.read` for a member
it does not read), which also says what is wrong with a damaged archive: this reader only
answers for what it reads entirely, as zipfile would.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import zipfile

#: `zipfile.ZIP_STORED`: the member's bytes are its data.
STORED = 0

_END = struct.Struct("<4s4H2LH")  # signature, disk numbers, entry counts, directory size and offset, comment length
_END_SIGNATURE = b"PK\x05\x06"
_LOCATOR = struct.Struct("<4sLQL")  # ZIP64: signature, disk of its end record, that record's offset, disks
_LOCATOR_SIGNATURE = b"PK\x06\x07"
_END64 = struct.Struct("<4sQ2H2L4Q")  # ZIP64: signature, size, versions, disks, entry counts, directory size, offset
_END64_SIGNATURE = b"PK\x06\x06"
_ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # a central directory header, as zipfile's `structCentralDir`
_ENTRY_SIGNATURE = b"PK\x01\x02"
#: A local file header, as zipfile's `structFileHeader` (name and extra field lengths last), and
#: its signature, which starts every archive torch writes.
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
LOCAL_SIGNATURE = b"PK\x03\x04"
_ZIP64_EXTRA = 0x0001
_OVERFLOW32 = 0xFFFFFFFF
#: General purpose flags a member may have here: a data descriptor after its bytes, UTF-8 name.
_KNOWN_FLAGS = 0x0008 | 0x0800
#: The highest "version needed to extract" zipfile reads (its MAX_EXTRACT_VERSION).
_MAX_EXTRACT_VERSION = 63

#: What reading a damaged archive raises, but for zipfile's own errors (see `errors`).
_READ_ERRORS = (OSError, ValueError, EOFError, NotImplementedError, struct.error, KeyError, UnicodeDecodeError)


class Unreadable(Exception):
    """What this reader does not read, or an inconsistency: `zipfile` reads it instead."""


def open_archive(path: Path) -> Archive | zipfile.ZipFile:
    """The zip archive at `path`, opened by this module's reader, or by zipfile's where that one
    does not read it. The errors a damaged archive raises are `errors()`."""
    try:
        return Archive(path)
    except Unreadable:
        import zipfile

        return zipfile.ZipFile(path)


def errors() -> tuple[type[BaseException], ...]:
    """What opening or reading a damaged archive raises (zipfile's own errors once it is imported)."""
    zipfile = sys.modules.get("zipfile")
    return _READ_ERRORS + ((zipfile.BadZipFile, zipfile.LargeZipFile) if zipfile is not None else ())


class Member:
    """One member of the central directory, named as `zipfile.ZipInfo` names it."""

    __slots__ = ("filename", "file_size", "compress_size", "header_offset", "compress_type", "CRC", "end")

    def __init__(self, filename: str, file_size: int, compress_size: int, header_offset: int,
                 compress_type: int, crc: int):
        self.filename, self.file_size, self.compress_size = filename, file_size, compress_size
        self.header_offset, self.compress_type, self.CRC = header_offset, compress_type, crc
        self.end = 0  # where the next member's local header, or the central directory, starts


class Archive:
    """The members of the zip archive at `path`, read when opened; `Unreadable` as above."""

    def __init__(self, path: Path):
        self._path = path
        self._zipfile: zipfile.ZipFile | None = None  # for a member this reader does not read
        self._file = open(path, "rb", buffering=0)
        try:
            self._members = _directory(self._file.fileno(), os.fstat(self._file.fileno()).st_size)
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            self._file.close()
            raise Unreadable(f"{type(exc).__name__}: {exc}") from None
        except BaseException:
            self._file.close()
            raise
        self._by_name = {member.filename: member for member in self._members}

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc_info) -> None:
        self._file.close()
        if self._zipfile is not None:
            self._zipfile.close()

    def infolist(self) -> list[Member]:
        return list(self._members)

    def namelist(self) -> list[str]:
        return [member.filename for member in self._members]

    def read(self, member: Member | str) -> bytes:
        """A member's bytes (zipfile's `read`): a stored one's checked against its CRC-32 here,
        any other read by zipfile."""
        if isinstance(member, str):
            member = self._by_name[member]
        try:
            return self._read_stored(member)
        except Unreadable:
            import zipfile

            if self._zipfile is None:
                self._zipfile = zipfile.ZipFile(self._path)
            return self._zipfile.read(self._zipfile.infolist()[self._members.index(member)])

    def _read_stored(self, member: Member) -> bytes:
        if member.compress_type != STORED:
            raise Unreadable(f"{member.filename} is compressed")
        header = os.pread(self._file.fileno(), LOCAL_HEADER.size, member.header_offset)
        if len(header) != LOCAL_HEADER.size:
            raise Unreadable(f"{member.filename}: a truncated local header")
        fields = LOCAL_HEADER.unpack(header)
        name_length, extra_length = fields[10], fields[11]
        start = member.header_offset + LOCAL_HEADER.size
        named = os.pread(self._file.fileno(), name_length, start)
        if fields[0] != LOCAL_SIGNATURE or named != member.filename.encode():
            raise Unreadable(f"{member.filename}: its local header names another member")
        start += name_length + extra_length
        if start + member.compress_size > member.end:
            raise Unreadable(f"{member.filename} overruns the member after it")
        data = os.pread(self._file.fileno(), member.compress_size, start)
        if len(data) != member.file_size or zlib.crc32(data) != member.CRC:
            raise Unreadable(f"{member.filename}: a short read or a bad CRC-32")
        return data


def _directory(fd: int, size: int) -> list[Member]:
    """The members the central directory lists, in its order, each with its `end`."""
    if size < _END.size:
        raise Unreadable("shorter than an end of central directory record")
    end_at = size - _END.size
    signature, disk, directory_disk, _, count, directory_size, directory_at, comment = _END.unpack(
        os.pread(fd, _END.size, end_at))
    if signature != _END_SIGNATURE or comment or disk or directory_disk:
        raise Unreadable("an archive comment, another disk, or no end record at the end")
    records_at = end_at  # where the directory's trailing records start
    if end_at >= _LOCATOR.size:
        locator = _LOCATOR.unpack(os.pread(fd, _LOCATOR.size, end_at - _LOCATOR.size))
        if locator[0] == _LOCATOR_SIGNATURE:
            if locator[1] or locator[3] > 1 or locator[2] + _END64.size != end_at - _LOCATOR.size:
                raise Unreadable("a ZIP64 end record on another disk, or not just before its locator")
            fields = _END64.unpack(os.pread(fd, _END64.size, locator[2]))
            if fields[0] != _END64_SIGNATURE or fields[4] or fields[5]:
                raise Unreadable("no ZIP64 end of central directory record where its locator says")
            count, directory_size, directory_at = fields[7], fields[8], fields[9]
            records_at = locator[2]
    if directory_at + directory_size != records_at:  # zipfile would read the archive as concatenated
        raise Unreadable("data between the central directory and its end record")
    directory = os.pread(fd, directory_size, directory_at)
    if len(directory) != directory_size:
        raise Unreadable("a truncated central directory")
    members, pos = [], 0
    while pos < directory_size:
        entry = _ENTRY.unpack_from(directory, pos)
        (signature, _, _, extract_version, _, flags, method, _, _, crc, compress_size, file_size,
         name_length, extra_length, comment_length, volume, _, _, header_offset) = entry
        if signature != _ENTRY_SIGNATURE or flags & ~_KNOWN_FLAGS or volume or extract_version > _MAX_EXTRACT_VERSION:
            raise Unreadable(f"central directory entry {len(members)} is not one this reader reads")
        pos += _ENTRY.size
        raw_name = directory[pos:pos + name_length]
        if len(raw_name) != name_length or not raw_name.isascii() or b"\0" in raw_name:
            raise Unreadable(f"central directory entry {len(members)}: a name zipfile may spell otherwise")
        extra = directory[pos + name_length:pos + name_length + extra_length]
        pos += name_length + extra_length + comment_length
        if _OVERFLOW32 in (file_size, compress_size, header_offset):
            file_size, compress_size, header_offset = _zip64_values(extra, file_size, compress_size, header_offset)
        if header_offset + LOCAL_HEADER.size + compress_size > directory_at:  # no read here asks for more than the file
            raise Unreadable(f"central directory entry {len(members)} lies past the central directory")
        members.append(Member(raw_name.decode("ascii"), file_size, compress_size, header_offset, method, crc))
    if pos != directory_size or len(members) != count:
        raise Unreadable("the central directory does not hold what its end record says")
    end = directory_at
    for member in sorted(members, key=lambda m: m.header_offset, reverse=True):
        member.end, end = end, member.header_offset
    return members


def _zip64_values(extra: bytes, file_size: int, compress_size: int, header_offset: int) -> tuple[int, int, int]:
    """The sizes and offset that overflow 32 bits, from the ZIP64 extra field (which holds, in
    this order, only those that do)."""
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, pos)
        if kind == _ZIP64_EXTRA:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            file_size, compress_size, header_offset = (
                values.pop(0) if value == _OVERFLOW32 else value for value in (file_size, compress_size, header_offset))
            return file_size, compress_size, header_offset
        pos += 4 + length
    raise Unreadable("a size or offset over 32 bits without its ZIP64 extra field")
