"""The wire format between `JaxOracle` and its worker: pickled messages, each after an 8-byte length.

Requests are dicts {"op", "mesh_shape", "args", "params"}. Replies are tuples:
("ready", info) once at start-up, then per request ("ok", outputs, path) or ("error", kind, message).
"""

from __future__ import annotations

import pickle
import struct
from typing import BinaryIO

HEADER = struct.Struct(">Q")


def encode(message: object) -> bytes:
    """Return `message` pickled, prefixed with its length."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def read_message(stream: BinaryIO) -> object | None:
    """Read one message from a blocking binary stream; return None at a clean end of stream.

    Raises:
        EOFError: the stream ended inside a message.
    """
    header = _read_exactly(stream, HEADER.size)
    if not header:
        return None
    (length,) = HEADER.unpack(header)
    payload = _read_exactly(stream, length)
    if len(payload) < length:
        raise EOFError(f"stream ended after {len(payload)} of {length} payload bytes")
    return pickle.loads(payload)


def write_message(stream: BinaryIO, message: object) -> None:
    """Write one message and flush it."""
    stream.write(encode(message))
    stream.flush()


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    chunks, missing = [], n
    while missing:
        chunk = stream.read(missing)
        if not chunk:
            if missing != n:
                raise EOFError(f"stream ended after {n - missing} of {n} bytes")
            break
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)
