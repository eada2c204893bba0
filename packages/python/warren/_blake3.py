"""BLAKE3 (hash mode, 32-byte digests) for volume pushes: the ``blake3`` module when it is
installed (it is not a Debian package), else this pure-Python implementation of the
reference algorithm (~1 MB/s; the push's hash cache means unchanged files are not re-read)."""

from __future__ import annotations

import struct
from typing import Any, Callable, Optional

_IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_PERM = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
_CHUNK_START, _CHUNK_END, _PARENT, _ROOT = 1, 2, 4, 8
_CHUNK_LEN, _BLOCK_LEN = 1024, 64
_M = 0xFFFFFFFF


def _compress(cv: tuple[int, ...], m: list[int], counter: int, block_len: int, flags: int) -> list[int]:
    s = [*cv, _IV[0], _IV[1], _IV[2], _IV[3], counter & _M, (counter >> 32) & _M, block_len, flags]
    for r in range(7):
        for a, b, c, d, x, y in (
            (0, 4, 8, 12, 0, 1),
            (1, 5, 9, 13, 2, 3),
            (2, 6, 10, 14, 4, 5),
            (3, 7, 11, 15, 6, 7),
            (0, 5, 10, 15, 8, 9),
            (1, 6, 11, 12, 10, 11),
            (2, 7, 8, 13, 12, 13),
            (3, 4, 9, 14, 14, 15),
        ):
            sa = (s[a] + s[b] + m[x]) & _M
            sd = s[d] ^ sa
            sd = ((sd >> 16) | (sd << 16)) & _M
            sc = (s[c] + sd) & _M
            sb = s[b] ^ sc
            sb = ((sb >> 12) | (sb << 20)) & _M
            sa = (sa + sb + m[y]) & _M
            sd ^= sa
            sd = ((sd >> 8) | (sd << 24)) & _M
            sc = (sc + sd) & _M
            sb ^= sc
            s[a], s[b], s[c], s[d] = sa, ((sb >> 7) | (sb << 25)) & _M, sc, sd
        if r < 6:
            m = [m[i] for i in _PERM]
    for i in range(8):
        s[i] ^= s[i + 8]
        s[i + 8] ^= cv[i]
    return s


def _words(block: bytes) -> list[int]:
    return list(struct.unpack("<16I", block.ljust(_BLOCK_LEN, b"\0")))


class _Output:
    def __init__(self, cv: tuple[int, ...], block: list[int], counter: int, block_len: int, flags: int) -> None:
        self.cv, self.block, self.counter, self.block_len, self.flags = cv, block, counter, block_len, flags

    def chaining_value(self) -> tuple[int, ...]:
        return tuple(_compress(self.cv, self.block, self.counter, self.block_len, self.flags)[:8])

    def root(self) -> bytes:
        words = _compress(self.cv, self.block, 0, self.block_len, self.flags | _ROOT)
        return struct.pack("<8I", *words[:8])


class PureBlake3:
    """Incremental BLAKE3: ``update(bytes)``, ``hexdigest()``."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, ...]] = []
        self._chunks = 0  # chunks completed
        self._cv: tuple[int, ...] = _IV
        self._block = b""
        self._blocks = 0  # blocks compressed in the current chunk
        self._chunk_len = 0

    def update(self, data: bytes) -> None:
        view = memoryview(data)
        while len(view):
            if self._chunk_len == _CHUNK_LEN:
                self._push_chunk(self._chunk_output().chaining_value())
            if len(self._block) == _BLOCK_LEN:
                flags = _CHUNK_START if self._blocks == 0 else 0
                self._cv = tuple(_compress(self._cv, _words(self._block), self._chunks, _BLOCK_LEN, flags)[:8])
                self._blocks += 1
                self._block = b""
            take = min(_BLOCK_LEN - len(self._block), _CHUNK_LEN - self._chunk_len, len(view))
            self._block += bytes(view[:take])
            self._chunk_len += take
            view = view[take:]

    def _chunk_output(self) -> _Output:
        flags = (_CHUNK_START if self._blocks == 0 else 0) | _CHUNK_END
        return _Output(self._cv, _words(self._block), self._chunks, len(self._block), flags)

    def _push_chunk(self, cv: tuple[int, ...]) -> None:
        self._chunks += 1
        total = self._chunks
        while total & 1 == 0:
            left = self._stack.pop()
            cv = _Output(_IV, [*left, *cv], 0, _BLOCK_LEN, _PARENT).chaining_value()
            total >>= 1
        self._stack.append(cv)
        self._cv, self._block, self._blocks, self._chunk_len = _IV, b"", 0, 0

    def hexdigest(self) -> str:
        output = self._chunk_output()
        for left in reversed(self._stack):
            output = _Output(_IV, [*left, *output.chaining_value()], 0, _BLOCK_LEN, _PARENT)
        return output.root().hex()


def _native() -> Optional[Callable[[], Any]]:
    try:
        import blake3  # type: ignore[import]
    except ImportError:
        return None
    return blake3.blake3  # type: ignore[no-any-return]


_NATIVE = _native()


def hasher() -> Any:
    """A fresh BLAKE3 hasher (``update``, ``hexdigest``)."""
    return _NATIVE() if _NATIVE is not None else PureBlake3()


def blake3_hex(data: bytes) -> str:
    h = hasher()
    h.update(data)
    return str(h.hexdigest())
