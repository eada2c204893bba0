"""The 64-bit integer rule of both SDKs (docs/sdk-cli.md "64-bit integers").

The wire carries 64-bit integers as decimal strings (the contract). Records the SDK returns
keep them as those strings, unchanged (lossless, and the same type in both SDKs); SDK method
arguments that are 64-bit take an ``int`` (sent as its decimal string) or a string (sent as it
is: the server judges it).
:func:`int64` reads one back as an ``int``.
"""

from __future__ import annotations

import re
from typing import Optional, Union

_DECIMAL = re.compile(r"^-?\d{1,20}$")
_MIN, _MAX = -(2**63), 2**64 - 1


def int64(value: object) -> Optional[int]:
    """A wire 64-bit integer (a decimal string, or a JSON number) as an ``int``; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _MIN <= value <= _MAX else None
    if isinstance(value, str) and _DECIMAL.match(value):
        parsed = int(value)
        return parsed if _MIN <= parsed <= _MAX else None
    return None


def wire_int64(value: Union[int, str]) -> str:
    """An SDK argument as the wire's decimal string: a ``str`` is sent as it is (the server
    judges it, answering invalid_argument); an ``int`` must fit 64 bits."""
    if isinstance(value, str):
        return value
    parsed = int64(value)
    if parsed is None:
        raise ValueError(f"not a 64-bit integer: {value!r}")
    return str(parsed)
