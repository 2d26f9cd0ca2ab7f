"""No code execution: hostile `pytorch_model.bin` files are refused before anything runs.

Each payload below is a pickle written opcode by opcode, so that what it would do is visible in
the test. Each one WOULD create the canary file if loaded naively: with plain `pickle.load` for
the payloads that run before any persistent id (most of them), or with
`torch.load(weights_only=False)` for the ones behind a storage reference (`needs_torch_load`).
They are never loaded by anything but bertconv here; `test_payloads_are_well_formed` checks
statically (pickletools, which executes nothing) that each is a complete pickle naming the
global it is meant to call.

bertconv must refuse every one with exit status 2 and a message naming the global, for every
command that reads a checkpoint, and the canary must not appear.
"""

from __future__ import annotations

import pickletools
import shlex
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bertconv.containers import torch_pickle
from bertconv.errors import BadInput
from conftest import FIXTURES, run_cli, run_in_process

ZIP_FIXTURE = FIXTURES / "hf" / "pretraining_bin" / "pytorch_model.bin"
CONFIG = FIXTURES / "hf" / "pretraining_bin" / "config.json"
WORD = "bert.embeddings.word_embeddings.weight"

# --- a pickle assembler: protocol 2 opcodes -------------------------------------------------

PROTO2 = b"\x80\x02"
MARK, TUPLE, REDUCE, STOP, BUILD, POP = b"(", b"t", b"R", b".", b"b", b"0"
EMPTY_LIST, APPENDS, EMPTY_DICT, SETITEMS, NONE, NEWFALSE = b"]", b"e", b"}", b"u", b"N", b"\x89"
BINPERSID = b"Q"


def glob(module: str, name: str) -> bytes:
    """GLOBAL: push `module.name` (the unpickler imports it)."""
    return b"c" + f"{module}\n{name}\n".encode()


def text(value: str) -> bytes:
    """BINUNICODE."""
    data = value.encode("utf-8")
    return b"X" + struct.pack("<I", len(data)) + data


def integer(value: int) -> bytes:
    """BININT."""
    return b"J" + struct.pack("<i", value)


def tup(*items: bytes) -> bytes:
    return MARK + b"".join(items) + TUPLE


def lst(*items: bytes) -> bytes:
    return EMPTY_LIST + (MARK + b"".join(items) + APPENDS if items else b"")


def dct(*pairs: tuple[bytes, bytes]) -> bytes:
    return EMPTY_DICT + (MARK + b"".join(k + v for k, v in pairs) + SETITEMS if pairs else b"")


def call(function: bytes, *args: bytes) -> bytes:
    """REDUCE: function(*args)."""
    return function + tup(*args) + REDUCE


def odict(*pairs: tuple[bytes, bytes]) -> bytes:
    """collections.OrderedDict([(k, v), ...]): the allowed container of a state dict."""
    return call(glob("collections", "OrderedDict"), lst(*(tup(k, v) for k, v in pairs)))


def storage(key: bytes, numel: int = 4, *, legacy: bool = False) -> bytes:
    """A persistent id as torch.save writes it: ('storage', torch.FloatStorage, key, 'cpu', n),
    with a sixth element (view metadata, None) in the legacy format."""
    view = (NONE,) if legacy else ()
    return tup(text("storage"), glob("torch", "FloatStorage"), key, text("cpu"), integer(numel), *view) + BINPERSID


def tensor(storage_ref: bytes, hooks: bytes | None = None) -> bytes:
    """torch._utils._rebuild_tensor_v2(storage, 0, (4,), (1,), False, hooks)."""
    return call(glob("torch._utils", "_rebuild_tensor_v2"), storage_ref, integer(0), tup(integer(4)),
                tup(integer(1)), NEWFALSE, hooks if hooks is not None else odict())


def pickle_of(body: bytes) -> bytes:
    return PROTO2 + body + STOP


# --- the payloads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Payload:
    """A hostile data.pkl. `body(canary, inner)` builds it; `names` is the global bertconv must
    name; `needs_torch_load`: it runs under torch.load(weights_only=False), not bare pickle.load."""

    label: str
    body: object
    names: str
    needs_torch_load: bool = False

    def build(self, canary: Path, inner: Path) -> bytes:
        return self.body(canary, inner)


def touch(canary: Path) -> bytes:
    return text(f"touch {shlex.quote(str(canary))}")


def python_creating(canary: Path) -> bytes:
    return text(f"open({str(canary)!r}, 'w').close()")


def deep_in_ordered_dict(canary: Path) -> bytes:
    """OrderedDict([(WORD, OrderedDict([("x", [1, {"y": posix.system("touch ...")}])]))])"""
    hostile = call(glob("posix", "system"), touch(canary))
    return odict((text(WORD), odict((text("x"), lst(integer(1), dct((text("y"), hostile)))))))


def _system(module: str):
    return lambda canary, inner: pickle_of(call(glob(module, "system"), touch(canary)))


PAYLOADS = [
    Payload("posix.system", _system("posix"), "posix.system"),
    Payload("os.system", _system("os"), "os.system"),
    Payload("nt.system", _system("nt"), "nt.system"),
    Payload("builtins.eval", lambda c, i: pickle_of(call(glob("builtins", "eval"), python_creating(c))),
            "builtins.eval"),
    Payload("builtins.exec", lambda c, i: pickle_of(call(glob("builtins", "exec"), python_creating(c))),
            "builtins.exec"),
    Payload("__builtin__.eval (python 2 name)",
            lambda c, i: pickle_of(call(glob("__builtin__", "eval"), python_creating(c))), "__builtin__.eval"),
    Payload("subprocess.Popen",
            lambda c, i: pickle_of(call(glob("subprocess", "Popen"), lst(text("touch"), text(str(c))))),
            "subprocess.Popen"),
    Payload("subprocess.run",
            lambda c, i: pickle_of(call(glob("subprocess", "run"), lst(text("touch"), text(str(c))))),
            "subprocess.run"),
    Payload("subprocess.check_output",
            lambda c, i: pickle_of(call(glob("subprocess", "check_output"), lst(text("touch"), text(str(c))))),
            "subprocess.check_output"),
    # getattr(__import__("os"), "system")("touch ...")
    Payload("builtins.getattr chain",
            lambda c, i: pickle_of(call(call(glob("builtins", "getattr"),
                                             call(glob("builtins", "__import__"), text("os")), text("system")),
                                        touch(c))),
            "builtins.getattr"),
    # an innocent-looking callable: open(canary, "w") creates the file
    Payload("__reduce__ to builtins.open",
            lambda c, i: pickle_of(call(glob("builtins", "open"), text(str(c)), text("w"))), "builtins.open"),
    Payload("__reduce__ to pathlib.Path.touch (via getattr)",
            lambda c, i: pickle_of(call(call(glob("builtins", "getattr"), call(glob("pathlib", "Path"), text(str(c))),
                                             text("touch")))),
            "builtins.getattr"),
    # torch.load(inner) on a second hostile file; plain torch.load is weights_only in torch >= 2.6,
    # so the payload binds weights_only=False with functools.partial (state set by BUILD).
    Payload("functools.partial(torch.load, weights_only=False)",
            lambda c, i: pickle_of(
                glob("functools", "partial") + tup(glob("torch", "load")) + REDUCE
                + tup(glob("torch", "load"), tup(), dct((text("weights_only"), NEWFALSE)), NONE) + BUILD
                + tup(text(str(i))) + REDUCE),
            "functools.partial"),
    Payload("torch.load", lambda c, i: pickle_of(call(glob("torch", "load"), text(str(i)))), "torch.load",
            needs_torch_load=True),
    # protocol 4 names a global by two strings on the stack (STACK_GLOBAL)
    Payload("STACK_GLOBAL posix.system",
            lambda c, i: b"\x80\x04" + b"\x8c\x05posix\x8c\x06system\x93" + tup(touch(c)) + REDUCE + STOP,
            "posix.system"),
    # INST and OBJ: older opcodes that import and call a class
    Payload("INST posix.system", lambda c, i: pickle_of(MARK + touch(c) + b"iposix\nsystem\n"), "posix.system"),
    Payload("OBJ posix.system", lambda c, i: pickle_of(MARK + glob("posix", "system") + touch(c) + b"o"),
            "posix.system"),
    # hidden in a well-formed state dict: in OrderedDict's (key, value) pairs, two levels down
    Payload("inside OrderedDict args", lambda c, i: pickle_of(deep_in_ordered_dict(c)), "posix.system"),
    # inside the tensor-rebuild args: in the storage's persistent id (built before BINPERSID,
    # so bare pickle.load runs it), and as the backward-hooks argument
    Payload("inside the tensor's persistent id",
            lambda c, i: pickle_of(odict((text(WORD), tensor(storage(call(glob("posix", "system"), touch(c))))))),
            "posix.system"),
    Payload("as the tensor's backward hooks",
            lambda c, i: pickle_of(odict((text(WORD), tensor(storage(text("0")),
                                                             hooks=call(glob("posix", "system"), touch(c)))))),
            "posix.system", needs_torch_load=True),
    Payload("after a good tensor",
            lambda c, i: pickle_of(odict((text(WORD), tensor(storage(text("0")))),
                                         (text("bert.embeddings.LayerNorm.weight"),
                                          call(glob("posix", "system"), touch(c))))),
            "posix.system", needs_torch_load=True),
    # BUILD sets an instance attribute __setstate__ = os.system; the second BUILD calls it
    Payload("BUILD __setstate__ = posix.system",
            lambda c, i: pickle_of(odict() + dct((text("__setstate__"), glob("posix", "system"))) + BUILD
                                   + touch(c) + BUILD),
            "posix.system"),
]

#: Hostile pickles made only of allowed globals: tricks on the stand-ins themselves.
GOOD_STATE = odict((text(WORD), tensor(storage(text("0")))))
ALLOWED_ONLY_TRICKS = [
    # __setstate__ planted on the state dict, then called by a second BUILD
    ("BUILD plants __setstate__",
     pickle_of(odict() + dct((text("__setstate__"), glob("collections", "OrderedDict"))) + BUILD + lst() + BUILD),
     "__setstate__"),
    # BUILD on the shared storage-type stand-in would change it for every later read in the process
    ("BUILD on torch.FloatStorage",
     pickle_of(glob("torch", "FloatStorage") + dct((text("dtype"), text("evil"))) + BUILD + POP + GOOD_STATE),
     "torch.FloatStorage"),
    ("BUILD on a rebuild function",
     pickle_of(glob("torch._utils", "_rebuild_tensor_v2") + dct((text("__code__"), NONE)) + BUILD + POP + GOOD_STATE),
     "_rebuild_tensor_v2"),
]


# --- files holding the payloads -------------------------------------------------------------


def torch_zip(path: Path, data_pkl: bytes, *, rename=lambda name: name, extra: dict[str, bytes] | None = None) -> Path:
    """The fixture's torch zip with its data.pkl replaced; `rename` maps every member name."""
    with zipfile.ZipFile(ZIP_FIXTURE) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for member in source.infolist():
            data = data_pkl if member.filename.endswith("/data.pkl") else source.read(member)
            out.writestr(rename(member.filename), data)
        for name, data in (extra or {}).items():
            out.writestr(name, data)
    return path


def legacy_file(path: Path, *, magic: bytes | None = None, sys_info: bytes | None = None,
                state_dict: bytes | None = None) -> Path:
    """A legacy (pre-1.6) torch file, pickle by pickle: magic number, protocol version, system
    info, the state dict, the storage keys; then storage "0" (4 floats). Any of the first four
    may be replaced by a hostile pickle."""
    magic_number = 0x1950A86A20F9469CFC6C
    good_magic = PROTO2 + b"\x8a\x0a" + magic_number.to_bytes(10, "little") + STOP  # LONG1
    good_sys_info = pickle_of(dct((text("protocol_version"), integer(1001)), (text("little_endian"), b"\x88"),
                                  (text("type_sizes"), dct((text("int"), integer(4))))))
    good_main = pickle_of(odict((text(WORD), tensor(storage(text("0"), legacy=True)))))
    parts = [magic or good_magic, pickle_of(integer(1001)), sys_info or good_sys_info, state_dict or good_main,
             pickle_of(lst(text("0"))), struct.pack("<q", 4), b"\0" * 16]
    path.write_bytes(b"".join(parts))
    return path


@pytest.fixture
def canary(tmp_path) -> Path:
    return tmp_path / "canary"


@pytest.fixture
def inner(tmp_path, canary) -> Path:
    """The second hostile file that the torch.load payloads would load."""
    return torch_zip(tmp_path / "inner.bin", pickle_of(call(glob("posix", "system"), touch(canary))))


def checkpoint_dir(tmp_path: Path, name: str = "ckpt") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    shutil.copy(CONFIG, directory / "config.json")
    return directory


COMMANDS = (("inspect",), ("audit",), ("verify", "--deep"), ("convert",))


def invoke(*args) -> tuple[int, str]:
    """`bertconv ARGS` in this process (fast); (exit status, stderr)."""
    result = run_in_process(*args)
    return result.exit_code, result.stderr


def assert_refused_everywhere(path: Path, global_name: str, canary: Path, tmp_path: Path, *,
                              run=invoke) -> None:
    """inspect, audit, verify --deep and convert all exit 2 naming the global; no canary."""
    for command in COMMANDS:
        args = (*command, path) + ((tmp_path / "out", "--to", "hf") if command == ("convert",) else ())
        status, stderr = run(*args)
        assert status == 2, (args, stderr)
        assert global_name in stderr, (args, stderr)
        assert "Traceback" not in stderr
        assert not canary.exists(), f"{args}: the payload ran"
    assert not (tmp_path / "out").exists()


def in_a_process(*args) -> tuple[int, str]:
    result = run_cli(*args)
    return result.exit_code, result.stderr


# --- tests ----------------------------------------------------------------------------------


def _globals_named(data: bytes) -> list[str]:
    """The globals a pickle names (GLOBAL, INST, and STACK_GLOBAL fed by literal strings),
    found by reading opcodes: nothing is executed."""
    names, strings = [], []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("GLOBAL", "INST"):
            names.append(arg.replace(" ", "."))
        elif opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            names.append(".".join(strings[-2:]))
    return names


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.label)
def test_payloads_are_well_formed(payload, canary, tmp_path):
    data = payload.build(canary, tmp_path / "inner.bin")
    assert data.endswith(STOP)
    ops = list(pickletools.genops(data))  # raises on a malformed pickle
    assert ops[-1][0].name == "STOP" and ops[-1][2] == len(data) - 1, "one pickle, nothing after it"
    assert payload.names in _globals_named(data)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.label)
def test_hostile_zip_pickle_is_refused_in_process(payload, canary, inner, tmp_path):
    path = torch_zip(checkpoint_dir(tmp_path) / "pytorch_model.bin", payload.build(canary, inner))
    with pytest.raises(BadInput) as error:
        torch_pickle.read_checkpoint(path)
    message = str(error.value)
    assert payload.names in message and str(path) in message
    assert "data.pkl" in message
    assert not canary.exists()


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.label)
def test_hostile_zip_is_refused_by_every_command(payload, canary, inner, tmp_path):
    path = torch_zip(checkpoint_dir(tmp_path) / "pytorch_model.bin", payload.build(canary, inner))
    assert_refused_everywhere(path, payload.names, canary, tmp_path)
    # the directory form resolves to the same file
    status, stderr = invoke("audit", path.parent)
    assert status == 2 and payload.names in stderr and not canary.exists()


def test_hostile_files_are_refused_by_the_real_command(canary, tmp_path):
    """As a user runs it: a process per command, for a zip, a legacy file and an odd layout."""
    hostile = pickle_of(call(glob("posix", "system"), touch(canary)))
    files = [torch_zip(checkpoint_dir(tmp_path, "zip") / "pytorch_model.bin", hostile),
             legacy_file(checkpoint_dir(tmp_path, "legacy") / "pytorch_model.bin", state_dict=hostile),
             torch_zip(checkpoint_dir(tmp_path, "odd") / "pytorch_model.bin", _fixture_data_pkl(),
                       extra={"other/data.pkl": hostile})]
    for path in files:
        assert_refused_everywhere(path, "posix.system", canary, tmp_path, run=in_a_process)


@pytest.mark.parametrize("label,data,named", ALLOWED_ONLY_TRICKS, ids=[t[0] for t in ALLOWED_ONLY_TRICKS])
def test_build_tricks_with_allowed_globals_are_refused(label, data, named, tmp_path):
    path = torch_zip(tmp_path / "pytorch_model.bin", data)
    with pytest.raises(BadInput) as error:
        torch_pickle.read_checkpoint(path)
    assert named in str(error.value) and "BUILD" in str(error.value)
    # and nothing the trick touched leaks into the next read in this process
    good = torch_pickle.read_checkpoint(ZIP_FIXTURE)
    assert str(good.tensors[WORD].dtype) == "float32"


def _odd_layouts(canary: Path) -> list[tuple[str, dict]]:
    hostile = pickle_of(call(glob("posix", "system"), touch(canary)))
    return [
        ("a/b/data.pkl", dict(rename=lambda n: "a/b/" + n.split("/", 1)[1])),
        ("two */data.pkl, the second hostile", dict(extra={"other/data.pkl": hostile})),
        ("../data.pkl", dict(rename=lambda n: "../" + n.split("/", 1)[1])),
        ("a/../../data.pkl", dict(rename=lambda n: "a/../../" + n.split("/", 1)[1])),
        ("absolute /archive/data.pkl", dict(rename=lambda n: "/" + n)),
        ("unicode name", dict(rename=lambda n: "модель\u202e/" + n.split("/", 1)[1])),
        ("backslashes", dict(rename=lambda n: n.replace("/", "\\"))),
        ("TorchScript constants.pkl beside a good data.pkl", dict(extra={"pytorch_model/constants.pkl": hostile})),
        ("a hostile pickle elsewhere in the archive", dict(extra={"pytorch_model/extra/x.pkl": hostile})),
    ]


@pytest.mark.parametrize("index", range(9), ids=[label for label, _ in _odd_layouts(Path("c"))])
def test_hostile_pickles_in_odd_zip_layouts(index, canary, tmp_path):
    """The hostile pickle is the only data.pkl, renamed; or an extra pickle beside a good one."""
    _, how = _odd_layouts(canary)[index]
    hostile = pickle_of(call(glob("posix", "system"), touch(canary)))
    data_pkl = _fixture_data_pkl() if "extra" in how else hostile
    path = torch_zip(checkpoint_dir(tmp_path) / "pytorch_model.bin", data_pkl, **how)
    assert_refused_everywhere(path, "posix.system", canary, tmp_path)


def test_odd_layout_without_a_hostile_pickle_is_refused_naming_the_members(tmp_path):
    path = torch_zip(tmp_path / "pytorch_model.bin", _fixture_data_pkl(), rename=lambda n: "a/b/" + n.split("/", 1)[1])
    with pytest.raises(BadInput, match="a/b/data.pkl"):
        torch_pickle.read_checkpoint(path)


def _fixture_data_pkl() -> bytes:
    with zipfile.ZipFile(ZIP_FIXTURE) as z:
        return z.read("pytorch_model/data.pkl")


LEGACY_CASES = [
    ("hostile magic-number pickle", "magic"),
    ("hostile system-info pickle", "sys_info"),
    ("hostile state-dict pickle", "state_dict"),
]


@pytest.mark.parametrize("label,where", LEGACY_CASES, ids=[c[0] for c in LEGACY_CASES])
def test_hostile_legacy_files_are_refused(label, where, canary, tmp_path):
    path = legacy_file(checkpoint_dir(tmp_path) / "pytorch_model.bin",
                       **{where: pickle_of(call(glob("posix", "system"), touch(canary)))})
    assert_refused_everywhere(path, "posix.system", canary, tmp_path)


@pytest.mark.parametrize("payload", [p for p in PAYLOADS if not p.label.startswith("functools")],
                         ids=lambda p: p.label)
def test_every_payload_as_a_legacy_state_dict(payload, canary, inner, tmp_path):
    path = legacy_file(tmp_path / "pytorch_model.bin", state_dict=payload.build(canary, inner))
    with pytest.raises(BadInput) as error:
        torch_pickle.read_checkpoint(path)
    assert payload.names in str(error.value) and "legacy state dict" in str(error.value)
    assert not canary.exists()


def test_well_formed_legacy_file_of_our_making_reads(tmp_path):
    """The hand-built legacy layout is torch's: without a payload it reads, so the refusals above
    come from the payloads and not from a malformed file."""
    checkpoint = torch_pickle.read_checkpoint(legacy_file(tmp_path / "pytorch_model.bin"))
    assert list(checkpoint.tensors) == [WORD]
    assert checkpoint.tensors[WORD].read().tolist() == [0.0] * 4


def test_legacy_file_readable_by_torch(tmp_path):
    """torch itself reads the hand-built legacy file (weights_only: nothing runs)."""
    torch = pytest.importorskip("torch")
    state = torch.load(legacy_file(tmp_path / "pytorch_model.bin"), weights_only=True)
    assert list(state) == [WORD] and state[WORD].tolist() == [0.0] * 4


def test_hostile_zip_readable_structure_by_torch_refuses_too(canary, tmp_path):
    """torch's own weights_only loader also refuses the zip payloads (a cross-check that the
    files are real torch archives whose pickle torch would run with weights_only=False)."""
    torch = pytest.importorskip("torch")
    path = torch_zip(tmp_path / "pytorch_model.bin", PAYLOADS[0].build(canary, tmp_path / "inner.bin"))
    with pytest.raises(Exception, match="system"):
        torch.load(path, weights_only=True)
    assert not canary.exists()


# --- HDF5: data that lives in other files ---------------------------------------------------

B4K_FIXTURE = FIXTURES / "bert4keras" / "v50-mlm"


def _hdf5_reaching_out(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """A bert4keras file whose MLM output bias is read from `secret.txt` beside it, by external
    storage, a virtual dataset or an external link. Converting it would copy the secret into
    the output checkpoint."""
    h5py = pytest.importorskip("h5py")
    directory = tmp_path / how.replace(" ", "-")
    shutil.copytree(B4K_FIXTURE, directory)
    secret = directory / "secret.txt"
    secret.write_bytes(b"SECRET!!" * 64)
    path = directory / "bert4keras_model.h5"
    with h5py.File(path, "r+") as f:
        group = f["MLM-Bias"]
        (name,) = [n.decode() if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
        shape, dtype = group[name].shape, group[name].dtype
        del group[name]
        if how == "external storage":
            group.create_dataset(name, shape=shape, dtype=dtype, external=[(str(secret), 0, h5py.h5f.UNLIMITED)])
        elif how == "virtual dataset":
            other = directory / "other.h5"
            with h5py.File(other, "w") as o:
                o["x"] = np.frombuffer(secret.read_bytes()[:4 * shape[0]], dtype="<f4")
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[:] = h5py.VirtualSource(str(other), "x", shape=shape)
            group.create_virtual_dataset(name, layout)
        else:
            other = directory / "other.h5"
            with h5py.File(other, "w") as o:
                o["x"] = np.frombuffer(secret.read_bytes()[:4 * shape[0]], dtype="<f4")
            group[name] = h5py.ExternalLink(str(other), "/x")
    return path, secret


@pytest.mark.parametrize("how", ["external storage", "virtual dataset", "external link"])
def test_hdf5_weights_read_from_other_files_are_refused(tmp_path, how):
    path, _ = _hdf5_reaching_out(tmp_path, how)
    out = tmp_path / "out"
    for args in (("inspect", path), ("verify", "--deep", path), ("convert", path, out, "--to", "hf")):
        status, stderr = invoke(*args)
        assert status == 2, (args, stderr)
        assert str(path) in stderr and "MLM-Bias" in stderr
    assert not out.exists()
