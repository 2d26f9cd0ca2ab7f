"""`pytorch_model.bin` read without torch and without running the pickle's code.

A torch checkpoint is a zip holding `<archive>/data.pkl` (a pickle describing the state dict)
and one member `<archive>/data/<key>` per storage. Loading the pickle normally calls whatever
globals it names, which is how a hostile file runs code. Here the unpickler resolves only an
allow-list of tensor-rebuild globals, each to a harmless stand-in that records dtype, shape,
strides and storage; every other global is refused by name before anything is called.
Storages are read through memory maps of the zip members (torch stores them uncompressed).

The legacy (pre-1.6, non-zip) serialization is read the same way: magic number, protocol and
system info pickles, the state-dict pickle, the storage key list, then the raw storages.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import struct
from collections import OrderedDict
from pathlib import Path

from .. import dtypes
from ..dtypes import DType
from ..errors import BadInput, bad_input
from ..records import field, record
from ..tensor import LazyTensor, StridedTensor, check_span
from . import zip_archive
from .one_reading import remembered

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from zipfile import ZipFile, ZipInfo

#: The first pickle of the legacy format is this integer.
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C

_STORAGE_DTYPES = {
    "FloatStorage": dtypes.FLOAT32, "HalfStorage": dtypes.FLOAT16, "BFloat16Storage": dtypes.BFLOAT16,
    "DoubleStorage": dtypes.FLOAT64, "LongStorage": dtypes.INT64, "IntStorage": dtypes.INT32,
    "ShortStorage": dtypes.INT16, "CharStorage": dtypes.INT8, "ByteStorage": dtypes.UINT8,
    "BoolStorage": dtypes.BOOL,
}


@record
class _StorageType:
    dtype: DType


@record
class _StorageRef:
    key: str
    dtype: DType
    numel: int


@record(frozen=False)
class TensorRecord:
    """What the pickle says about one tensor: its storage, and the view into it."""

    storage: _StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def identity(self) -> tuple:
        """Equal for two names that are views of the same bytes (tying by identity)."""
        return (self.storage.key, self.offset, self.shape, self.stride)


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored, **_kw) -> TensorRecord:
    if not isinstance(storage, _StorageRef):
        raise BadInput(f"tensor rebuild got {type(storage).__name__} where a storage was expected")
    return TensorRecord(storage, int(storage_offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data, *_ignored, **_kw):
    return data


def _ordered_dict(*args, **kwargs):
    return OrderedDict(*args, **kwargs)


class NamespaceStandIn:
    """What an `argparse.Namespace` in a pickle becomes: its attributes, recorded in `attributes`,
    and nothing else (no attribute of its own is ever set from the file, no method runs).

    fairseq (before its Hydra configs) saves the training command's options as `args`, an
    argparse.Namespace, beside the model's state dict; the model's sizes are read from them.
    """

    __slots__ = ("attributes",)

    def __new__(cls, *args, **kwargs):
        if args or kwargs:  # Namespace pickles as NEWOBJ with no arguments, then BUILD
            raise BadInput(f"argparse.Namespace created with arguments {args!r:.100}, which pickle never passes")
        instance = super().__new__(cls)
        instance.attributes = {}
        return instance


#: The only globals a state-dict pickle may name, each justified. Everything else is refused.
_ALLOWED = {
    # fairseq's `args` (see NamespaceStandIn): recorded, never an argparse object.
    ("argparse", "Namespace"): NamespaceStandIn,
    ("collections", "OrderedDict"): _ordered_dict,
    # Megatron-LM's `args` state its `params_dtype`: a torch dtype, recorded by its name.
    **{("torch", name): f"torch.{name}" for name in ("float16", "bfloat16", "float32")},
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGE_DTYPES.items()},
}


class UnsafePickle(BadInput):
    """The pickle names a global outside the allow-list, or sets state that a state dict never
    sets: loading it could run code."""


def _stand_in_name(obj) -> str:
    """The global a stand-in was resolved from (for messages), else the object's type."""
    for (module, name), value in _ALLOWED.items():
        if value is obj:
            return f"{module}.{name}"
    return type(obj).__name__


def _plain_attributes(state) -> bool:
    """A dict of attribute names (no dunder: nothing that could act as a method)."""
    return isinstance(state, dict) and all(isinstance(k, str) and not k.startswith("__") for k in state)


# The pure-Python unpickler, not the C one: the C unpickler sizes its memo array by the largest
# memo index a file names, so a 20-byte pickle can demand gigabytes; the Python one uses a dict.
class _SafeUnpickler(pickle._Unpickler):
    def __init__(self, stream, path: Path, member: str):
        super().__init__(stream)
        self._path = path
        self._member = member

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickle(
                f"{self._path}: {self._member} calls {module}.{name}, which is not a tensor-rebuild "
                f"function; refusing to load it (loading this file with torch.load would run that call)"
            ) from None

    def load_build(self):
        """BUILD sets an object's state. A state dict uses it only to give an OrderedDict its
        `_metadata` attribute; anything else (state for a stand-in shared by every read, or an
        instance attribute such as `__setstate__` that a second BUILD would call) is refused."""
        state, target = self.stack[-1], self.stack[-2]
        if type(target) is NamespaceStandIn and _plain_attributes(state):
            target.attributes.update(self.stack.pop())
            return
        if not (type(target) is OrderedDict and isinstance(state, dict)
                and all(isinstance(k, str) and not k.startswith("__") for k in state)):
            keys = ", ".join(repr(k) for k in state) if isinstance(state, dict) else type(state).__name__
            raise UnsafePickle(
                f"{self._path}: {self._member} uses BUILD to set {keys:.200} on {_stand_in_name(target)}, "
                f"which a state dict never does; refusing to load it (with torch.load this is a way to "
                f"plant a __setstate__ that runs code)")
        super().load_build()

    dispatch = {**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build}


    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise bad_input(self._path, f"{self._member}: unexpected persistent id {pid!r:.200}")
        return _StorageRef(str(pid[2]), pid[1].dtype, int(pid[4]))


class _ClampedReader:
    """A file whose reads never ask for more than is left in it.

    A pickle opcode can claim a length of gigabytes; a buffered file's `read(n)` allocates
    `n` bytes before finding out the file is shorter. Clamping keeps every allocation within
    the file's size.
    """

    def __init__(self, file: io.BufferedIOBase, size: int):
        self._file = file
        self._size = size

    def read(self, n: int = -1) -> bytes:
        left = max(0, self._size - self._file.tell())
        return self._file.read(left if n is None or n < 0 else min(n, left))

    def readline(self, limit: int = -1) -> bytes:
        left = max(0, self._size - self._file.tell())
        return self._file.readline(left if limit is None or limit < 0 else min(limit, left))


def _unpickle(stream, path: Path, member: str):
    """Load one pickle from `stream` with the safe unpickler; any failure is `BadInput`."""
    try:
        return _SafeUnpickler(stream, path, member).load()
    except BadInput:
        raise
    except Exception as exc:  # a malformed pickle raises many kinds of error
        raise bad_input(path, f"{member} is not a readable pickle: {type(exc).__name__}: {exc}") from None


@record
class NonTensor:
    """An entry that is not a tensor: its Python type, and how many tensor values it holds
    (an optimizer state saved beside the model holds many; an int or a string none)."""

    type_name: str
    values: int


@record
class TorchCheckpoint:
    """A state dict's tensors (lazy) and, per name, the identity of the bytes it views.

    Attributes:
      non_tensors: entries of the state dict that are not tensors (ints, lists, strings).
      wrapper: the key a training script saved the state dict under (`{"model": state_dict,
        "optimizer": ...}`), or None when the pickle is the state dict itself.
      beside: the other top-level entries of such a save (optimizer, epoch, ...).
      settings: the training options saved beside the state dict, by key: the attributes of an
        argparse.Namespace (fairseq's `args`) or a plain dict of plain values (fairseq's `cfg`).
    """

    path: Path
    tensors: dict[str, LazyTensor]
    identities: dict[str, tuple]
    non_tensors: dict[str, NonTensor]
    wrapper: str | None = None
    beside: dict[str, NonTensor] = field(default_factory=dict)
    settings: dict[str, dict] = field(default_factory=dict)


def looks_like_torch(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head == zip_archive.LOCAL_SIGNATURE or head[:1] == b"\x80"


def read_checkpoint(path: Path, *, arrange=None) -> TorchCheckpoint:
    """Read a torch state dict's layout (names, dtypes, shapes, storage spans) safely; `arrange`
    maps the unpickled object to the one read (a library's nested state dict flattened). Within
    one reading (`one_reading`) the file is unpickled once for every reader that asks (fairseq's,
    fair-esm's and Megatron-LM's read a .bin too), listed once for those taking it as saved."""
    path = Path(path)
    records, spans = remembered(path, "torch records", lambda: _read_records(path))
    if arrange is not None:
        return _assemble(path, arrange(records), spans)
    return remembered(path, "torch checkpoint", lambda: _assemble(path, records, spans))


def _read_records(path: Path) -> tuple[object, dict[str, tuple[int, int]]]:
    """The unpickled object (tensors as `TensorRecord`s) and each storage's (offset, bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise bad_input(path, f"cannot read: {exc.strerror or exc}") from None
    if head == zip_archive.LOCAL_SIGNATURE:
        return _read_zip(path)
    if head[:1] == b"\x80":
        return _read_legacy(path)
    raise bad_input(path, "not a torch checkpoint (neither a zip archive nor a pickle)")


#: Keys under which training scripts save a model's state dict beside their own state, in the
#: order they are tried (PyTorch Lightning `state_dict`, the tutorials' `model_state_dict`, ...).
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "module", "model_state", "net")
#: Nested dicts deeper than this are not searched for a state dict.
MAX_WRAPPING = 4


def _state_dict(obj, path: Path) -> tuple[dict, str | None, dict]:
    """(the state dict, the key path it was saved under or None, the entries saved beside it).

    A state dict maps names to tensors; a training script's save wraps one under a key such as
    `model` next to an optimizer, an epoch and such, sometimes several levels deep.
    """
    if not isinstance(obj, dict):
        raise bad_input(path, f"the pickle holds a {type(obj).__name__}, expected a state dict (name -> tensor)")
    keys: list[str] = []
    beside: dict = {}
    for _ in range(MAX_WRAPPING):
        if any(isinstance(v, TensorRecord) for v in obj.values()):
            break
        key = next((k for k in STATE_DICT_KEYS if isinstance(obj.get(k), dict) and _holds_tensors(obj[k])), None)
        if key is None:
            break
        prefix = "/".join(keys + [""])
        beside.update({f"{prefix}{k}": v for k, v in obj.items() if k != key})
        keys.append(key)
        obj = obj[key]
    return obj, "/".join(keys) or None, beside


def _holds_tensors(obj, depth: int = MAX_WRAPPING) -> bool:
    if isinstance(obj, TensorRecord):
        return True
    if depth and isinstance(obj, dict):
        return any(_holds_tensors(v, depth - 1) for v in obj.values())
    return False


def _describe(value, depth: int = 8) -> NonTensor:
    """A non-tensor entry's type and the tensor values inside it (nested containers counted)."""
    type_name = "argparse.Namespace" if isinstance(value, NamespaceStandIn) else type(value).__name__
    return NonTensor(type_name, _values(value, depth))


def _values(value, depth: int) -> int:
    if isinstance(value, TensorRecord):
        return math.prod(value.shape)
    if depth == 0:
        return 0
    if isinstance(value, dict):
        return sum(_values(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_values(v, depth - 1) for v in value)
    return 0


def _read_zip(path: Path) -> tuple[dict, dict[str, tuple[int, int]]]:
    try:
        with zip_archive.open_archive(path) as archive:
            return _read_archive(path, archive)
    except BadInput:
        raise
    except zip_archive.errors() as exc:
        raise bad_input(path, f"torch zip archive is damaged: {type(exc).__name__}: {exc}") from None


def _read_archive(path: Path, archive: zip_archive.Archive | ZipFile) -> tuple[dict, dict[str, tuple[int, int]]]:
    members = archive.infolist()
    file_size = os.path.getsize(path)
    pickles = [m for m in members if m.filename.endswith("data.pkl") and m.filename.count("/") == 1]
    if len(pickles) != 1:
        _refuse_other_pickles(path, archive, members, file_size)
        found = ", ".join(repr(m.filename) for m in members if m.filename.endswith(".pkl")) or "none"
        raise bad_input(path, f"expected one <archive>/data.pkl in the zip, found {found}")
    pkl = pickles[0]
    prefix = pkl.filename[: -len("data.pkl")]
    _check_member_size(path, pkl, file_size)
    byteorder = prefix + "byteorder"
    if byteorder in archive.namelist() and archive.read(byteorder).strip() not in (b"little", b""):
        raise bad_input(path, "big-endian torch checkpoints are not supported")
    records = _unpickle(io.BytesIO(archive.read(pkl)), path, pkl.filename)
    _refuse_other_pickles(path, archive, [m for m in members if m is not pkl], file_size)
    spans = {}
    with open(path, "rb", buffering=0) as file:  # once for every local header, each read exactly
        for member in members:
            if member.filename.startswith(prefix + "data/"):
                key = member.filename[len(prefix + "data/"):]
                spans[key] = (_member_data_offset(path, file, member, file_size), member.file_size)
    return records, spans


def _check_member_size(path: Path, member: zip_archive.Member | ZipInfo, file_size: int) -> None:
    if member.file_size > file_size:
        raise bad_input(path, f"{member.filename!r} claims {member.file_size} bytes, more than the file")


def _refuse_other_pickles(path: Path, archive: zip_archive.Archive | ZipFile, members: list,
                          file_size: int) -> None:
    """Read every other `*.pkl` member with the safe unpickler and raise `UnsafePickle` for one
    that names a global outside the allow-list.

    bertconv reads only `<archive>/data.pkl`, but torch may load another pickle of the same zip
    (a TorchScript archive's `constants.pkl`, or whichever `data.pkl` its archive-name rule
    picks), so a hostile pickle anywhere in the archive is refused, naming its global. Pickles
    that are merely malformed are left alone here.
    """
    for member in members:
        if not member.filename.endswith(".pkl"):
            continue
        _check_member_size(path, member, file_size)
        try:
            _unpickle(io.BytesIO(archive.read(member)), path, repr(member.filename))
        except UnsafePickle:
            raise
        except BadInput:
            pass


def _member_data_offset(path: Path, file: io.RawIOBase, member: zip_archive.Member | ZipInfo, file_size: int) -> int:
    """Where a stored (uncompressed) member's bytes start, from its local header (read from
    `file`, the archive at `path` opened for reading)."""
    if member.compress_type != zip_archive.STORED:
        raise bad_input(path, f"zip member {member.filename} is compressed; torch stores storages "
                              f"uncompressed and bertconv maps them directly")
    check_span(path, member.header_offset, zip_archive.LOCAL_HEADER.size, file_size, f"zip member {member.filename}")
    file.seek(member.header_offset)
    fields = zip_archive.LOCAL_HEADER.unpack(file.read(zip_archive.LOCAL_HEADER.size))
    if fields[0] != zip_archive.LOCAL_SIGNATURE:
        raise bad_input(path, f"zip member {member.filename}: bad local header signature")
    name_length, extra_length = fields[10], fields[11]
    offset = member.header_offset + zip_archive.LOCAL_HEADER.size + name_length + extra_length
    check_span(path, offset, member.file_size, file_size, f"zip member {member.filename}")
    return offset


def _read_legacy(path: Path) -> tuple[dict, dict[str, tuple[int, int]]]:
    """The pre-zip format: five pickles, then each storage as an 8-byte element count and its
    raw bytes. Only the pickles are read here; storages stay on disk."""
    file_size = os.path.getsize(path)
    with open(path, "rb") as file:
        stream = _ClampedReader(file, file_size)
        magic = _unpickle(stream, path, "legacy magic number")
        if magic != LEGACY_MAGIC_NUMBER:
            raise bad_input(path, "not a torch checkpoint: a pickle, but without torch's magic number "
                                  "(refusing to unpickle arbitrary objects)")
        _unpickle(stream, path, "legacy protocol version")
        _unpickle(stream, path, "legacy system info")
        records = _unpickle(stream, path, "legacy state dict")
        keys = _unpickle(stream, path, "legacy storage keys")
        if not isinstance(keys, list):
            raise bad_input(path, "legacy storage key list is not a list")
        itemsizes = {r.storage.key: r.storage.dtype.itemsize for r in _records(records)}
        spans = {}
        position = file.tell()
        for key in keys:
            key = str(key)
            check_span(path, position, 8, file_size, f"legacy storage {key}")
            file.seek(position)
            (numel,) = struct.unpack("<q", file.read(8))
            nbytes = numel * itemsizes.get(key, 1)
            check_span(path, position + 8, nbytes, file_size, f"legacy storage {key}")
            spans[key] = (position + 8, nbytes)
            position += 8 + nbytes
    return records, spans


def _records(obj, depth: int = MAX_WRAPPING + 8) -> list[TensorRecord]:
    """Every tensor record in the unpickled object (a state dict, or a training save around one)."""
    if isinstance(obj, TensorRecord):
        return [obj]
    if depth == 0:
        return []
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [r for v in values for r in _records(v, depth - 1)]


def _assemble(path: Path, saved, spans: dict[str, tuple[int, int]]) -> TorchCheckpoint:
    state, wrapper, beside = _state_dict(saved, path)
    tensors: dict[str, LazyTensor] = {}
    identities: dict[str, tuple] = {}
    non_tensors: dict[str, NonTensor] = {}
    for name, value in state.items():
        name = str(name)
        if not isinstance(value, TensorRecord):
            non_tensors[name] = _describe(value)
            continue
        storage = value.storage
        if storage.key not in spans:
            raise bad_input(path, f"tensor {name!r}: storage {storage.key!r} is not in the file")
        offset, nbytes = spans[storage.key]
        if nbytes != storage.numel * storage.dtype.itemsize:
            raise bad_input(path, f"tensor {name!r}: storage {storage.key!r} holds {nbytes} bytes, "
                                  f"expected {storage.numel} x {storage.dtype.itemsize}")
        if any(d < 0 for d in value.shape) or any(s < 0 for s in value.stride) or len(value.shape) != len(value.stride):
            raise bad_input(path, f"tensor {name!r}: bad size {list(value.shape)} / stride {list(value.stride)}")
        numel = math.prod(value.shape)
        if numel > storage.numel:
            raise bad_input(path, f"tensor {name!r}: {numel} elements viewed over a storage of "
                                  f"{storage.numel}; a saved parameter cannot be larger than its bytes")
        if numel:
            last = value.offset + sum((d - 1) * s for d, s in zip(value.shape, value.stride))
            if value.offset < 0 or last >= storage.numel:
                raise bad_input(path, f"tensor {name!r}: view of shape {list(value.shape)} at offset "
                                      f"{value.offset} reaches past its storage of {storage.numel} elements")
        tensors[name] = StridedTensor(path, offset, nbytes, storage.dtype, value.shape, value.stride, value.offset)
        identities[name] = value.identity
    settings = {str(k): _settings(v) for k, v in beside.items() if isinstance(v, (NamespaceStandIn, dict))}
    return TorchCheckpoint(path, tensors, identities, non_tensors, wrapper,
                           {str(k): _describe(v) for k, v in beside.items()}, settings)


def _settings(value, depth: int = 4):
    """Options as plain data: a Namespace stand-in's attributes, nested, as dicts."""
    if isinstance(value, NamespaceStandIn):
        value = value.attributes
    if isinstance(value, dict) and depth:
        return {str(k): _settings(v, depth - 1) for k, v in value.items()}
    return value
