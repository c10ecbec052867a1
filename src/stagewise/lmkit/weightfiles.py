"""Which weight files are read, checked before anything loads them.

* A Hugging Face model folder is read from its safetensors files only. A folder whose only
  weights are a pickle (``pytorch_model.bin``: zip-format or legacy ``torch.save``, ``*.pt``,
  ``*.ckpt``, ...) is refused in one line: unpickling a file someone else made can run code,
  and ``torch.load(weights_only=True)`` refusing it mid-load was a traceback
  (:func:`check_weight_folder`; loads also pass ``use_safetensors=True``).
* A GGUF file is walked through before transformers parses it (:func:`check_gguf`): the magic
  bytes, the version, tensor and metadata counts the file's size can hold, every metadata value
  and tensor description inside the file, and every tensor's data inside the file. A header
  alone, a tensor count of 2**62 or a truncated file is one line naming the file, not a
  traceback from the parser (or a wait while it tries to allocate 2**62 entries).

GGUF layout (little-endian; https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)::

    magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
    kv_count x   (key: string, value_type u32, value)       string = u64 length + UTF-8 bytes
    tensor_count x (name: string, n_dims u32, dims u64[n_dims], ggml_type u32, offset u64)
    padding to general.alignment (default 32) | tensor data (offsets relative to its start)
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import math
import mmap
import os
import struct
from pathlib import Path
from typing import Any, Iterator

from ..errors import NotAvailable, UserError

SAFETENSORS_PATTERNS = ("*.safetensors",)
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle", "pytorch_model.bin.index.json")
"""Weight files in Python's pickle format (torch.save, zip or legacy) that are never read."""

CONVERT_HINT = ("convert it where you trust the file: AutoModelForCausalLM.from_pretrained(folder).save_pretrained(new_folder) "
                "writes model.safetensors")

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
GGUF_HEADER_BYTES = 24  # magic, version, tensor_count, kv_count
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
_MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset
_MIN_KV = 8 + 4 + 1  # key length, value type, a one-byte value
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType -> bytes
_STRING, _ARRAY = 8, 9
_MAX_NESTING = 8


def check_weight_folder(subject: str, folder: Path) -> None:
    """One-line UserError unless the model folder ``folder`` has safetensors weights:
    pickle-only weights are refused (naming them), no weights at all is said so.

    Example::

        check_weight_folder("model.name=m", Path("m"))   # UserError when m/ holds only pytorch_model.bin
    """
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    if any(fnmatch.fnmatch(n, pattern) for n in names for pattern in SAFETENSORS_PATTERNS):
        return
    pickles = [n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in PICKLE_PATTERNS)]
    if pickles:
        shown = ", ".join(pickles[:3]) + (f" and {len(pickles) - 3} more" if len(pickles) > 3 else "")
        raise UserError(f"{subject}: the folder {folder} holds only pickle weights ({shown}); only safetensors weights "
                        f"(model.safetensors) or a GGUF file (model.gguf_file) are read, since loading a pickle can run "
                        f"code; {CONVERT_HINT}")
    raise UserError(f"{subject}: the folder {folder} has no weights (model.safetensors); only safetensors weights or a "
                    "GGUF file (model.gguf_file) are read")


class _Malformed(Exception):
    """Why a GGUF file cannot be read (becomes the UserError's reason)."""


class _Cursor:
    """Reads little-endian fields of ``buf`` (size bytes) from ``pos``, never past its end."""

    def __init__(self, buf: Any, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Malformed(f"truncated: {what} at byte {self.pos} needs {n} bytes, the file ends at byte {self.size}")
        self.pos += n

    def unpack(self, fmt: str, n: int, what: str) -> int:
        start = self.pos
        self.skip(n, what)
        return int(struct.unpack_from(fmt, self.buf, start)[0])

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        start = self.pos
        self.skip(n, what)
        return bytes(self.buf[start:self.pos]).decode("utf-8", errors="replace")

    def count(self, n: int, each: int, what: str) -> int:
        """``n`` items of at least ``each`` bytes must fit in what is left of the file."""
        left = self.size - self.pos
        if n * each > left:
            room = "the file ends there" if left == 0 else f"only {left} bytes follow, room for at most {left // each}"
            raise _Malformed(f"announces {n} {what} at byte {self.pos}, but {room}")
        return n


def _skip_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> int | None:
    """Skip one metadata value; returns it when it is an unsigned/signed integer (alignment)."""
    what = f"the value of metadata key {key!r}"
    if vtype in _SCALARS:
        if vtype in (4, 5):  # uint32, int32: general.alignment is one
            return cur.unpack("<I" if vtype == 4 else "<i", 4, what)
        cur.skip(_SCALARS[vtype], what)
        return None
    if vtype == _STRING:
        cur.skip(cur.u64(f"the length of {what}"), what)
        return None
    if vtype == _ARRAY:
        if depth >= _MAX_NESTING:
            raise _Malformed(f"metadata key {key!r}: arrays nested deeper than {_MAX_NESTING}")
        etype = cur.u32(f"the element type of {what}")
        n = cur.u64(f"the length of {what}")
        if etype in _SCALARS:
            cur.count(n, _SCALARS[etype], f"array elements for metadata key {key!r}")
            cur.skip(n * _SCALARS[etype], what)
        elif etype == _STRING:
            cur.count(n, 8, f"array elements for metadata key {key!r}")
            for _ in range(n):
                cur.skip(cur.u64(f"the length of a string in {what}"), what)
        elif etype == _ARRAY:
            cur.count(n, 12, f"array elements for metadata key {key!r}")
            for _ in range(n):
                _skip_value(cur, _ARRAY, key, depth + 1)
        else:
            raise _Malformed(f"metadata key {key!r}: unknown array element type {etype}")
        return None
    raise _Malformed(f"metadata key {key!r}: unknown value type {vtype}")


def _quant_sizes() -> dict[int, tuple[int, int]]:
    """ggml type -> (block size, bytes per block), from the gguf package (empty without it)."""
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        return {}
    return {int(kind): (int(block), int(nbytes)) for kind, (block, nbytes) in GGML_QUANT_SIZES.items()}


def _walk(buf: Any, size: int) -> int:
    """Check the layout of a GGUF file's bytes; returns its tensor count."""
    if size < GGUF_HEADER_BYTES:
        raise _Malformed(f"{size} bytes, too short for a GGUF header of {GGUF_HEADER_BYTES} bytes")
    cur = _Cursor(buf, size)
    cur.skip(4, "the magic bytes")
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise _Malformed(f"it does not start with the GGUF magic bytes {GGUF_MAGIC!r} but {bytes(buf[:4])!r}")
    version = cur.u32("the version")
    if version not in GGUF_VERSIONS:
        raise _Malformed(f"GGUF version {version} is not read (versions {', '.join(map(str, GGUF_VERSIONS))})")
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata count")
    if n_tensors == 0:
        raise _Malformed("holds no tensors (tensor count 0), so it is no model")
    cur.count(n_kv, _MIN_KV, "metadata entries")  # every loop below is bounded by the file's size
    alignment = GGUF_DEFAULT_ALIGNMENT
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}")
        value = _skip_value(cur, cur.u32(f"the value type of metadata key {key!r}"), key)
        if key == "general.alignment":
            if value is None or value <= 0 or value & (value - 1):
                raise _Malformed(f"general.alignment={value} is not a power of two")
            alignment = value
    cur.count(n_tensors, _MIN_TENSOR_INFO, "tensor descriptions")
    sizes = _quant_sizes()
    tensors = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}")
        n_dims = cur.u32(f"the dimension count of tensor {name!r}")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise _Malformed(f"tensor {name!r} has {n_dims} dimensions (1 to {GGML_MAX_DIMS})")
        dims = [cur.u64(f"a dimension of tensor {name!r}") for _ in range(n_dims)]
        kind = cur.u32(f"the type of tensor {name!r}")
        offset = cur.u64(f"the data offset of tensor {name!r}")
        tensors.append((name, dims, kind, offset))
    start = -(-cur.pos // alignment) * alignment  # the data section starts at the next multiple of the alignment
    for name, dims, kind, offset in tensors:
        if sizes and kind not in sizes:
            raise _Malformed(f"tensor {name!r} has an unknown type {kind}")
        block, per_block = sizes.get(kind, (1, 0))
        elements = math.prod(dims)
        if elements % block:
            raise _Malformed(f"tensor {name!r}: {elements} elements are not whole blocks of {block}")
        end = start + offset + elements // block * per_block
        if end > size:
            raise _Malformed(f"truncated: tensor {name!r} ends at byte {end}, the file ends at byte {size}")
    return n_tensors


_checked: dict[tuple[str, int, int], int] = {}  # (real path, size, mtime_ns) -> tensor count, of files that passed


def check_gguf(path: Path, subject: str | None = None) -> int:
    """The tensor count of the GGUF file ``path``; one-line UserError (``subject``, default the
    path, then what is wrong) when its layout cannot be read. A file that passed is not walked
    again while its size and modification time stay the same.

    Example::

        check_gguf(Path("SmolLM2-135M-Instruct.Q4_1.gguf"))   # 272; UserError for a truncated copy
    """
    label = subject or str(path)
    try:
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key in _checked:
            return _checked[key]
        with open(path, "rb") as handle:
            if stat.st_size < GGUF_HEADER_BYTES:
                n = _walk(handle.read(), stat.st_size)
            else:
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                    n = _walk(buf, stat.st_size)
    except _Malformed as err:
        raise UserError(f"{label}: not a readable GGUF file ({err})") from None
    except OSError as err:
        raise UserError(f"{label}: cannot be read ({err.strerror or err})") from None
    _checked[key] = n
    return n


def require_gguf_packages() -> None:
    """One-line NotAvailable unless gguf and accelerate (transformers' GGUF loading) are installed.

    Example::

        require_gguf_packages()                     # NotAvailable("gguf", ...) without `pip install -e '.[gguf]'`
    """
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise NotAvailable(needed, f"model.gguf_file: loading GGUF needs the '{needed}' package (pip install {needed})")


@contextlib.contextmanager
def one_gguf_parse() -> Iterator[None]:
    """Inside the block a GGUF file is parsed once: transformers reads the same file's header
    three times (config, tokenizer, weights; ~5 s each for SmolLM2's 49k-token vocabulary), so
    ``gguf.GGUFReader`` returns one read-only reader per (path, mode) here.

    Example::

        with one_gguf_parse():
            tok = load_tokenizer(cfg)               # the file's header parsed here ...
            model = load_pretrained(cfg, dtype)     # ... and reused here
    """
    try:
        import gguf
    except ImportError:  # load_pretrained says what is missing
        yield
        return

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = original(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]
