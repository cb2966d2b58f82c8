"""The one place the environment switch is read.

``ECHO_ALLREDUCE`` (read when an :class:`~echo_allreduce.EchoAllReduce` is constructed):

=========  ===========================================================================
unset      the constructor's arguments decide
``off``    no Echo: ``torch.distributed.all_reduce`` on the group (chains are ignored)
``int4``   quant ``zero_aware``, 4 bits (group size, compensator, storage as passed)
``int8``   quant ``zero_aware``, 8 bits
``none``   quant ``none``: Echo's unquantized 16-bit path
=========  ===========================================================================
"""

from __future__ import annotations

import os
from typing import Optional

ENV = "ECHO_ALLREDUCE"
_VALUES = ("off", "int4", "int8", "none")


def env_mode() -> Optional[str]:
    """The switch's value ('off', 'int4', 'int8', 'none'), or None when unset or empty."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value not in _VALUES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(_VALUES)} (or unset)")
    return value


def apply_env(quant: str, bits: int) -> tuple[bool, str, int]:
    """(use Echo?, quant, bits) after the switch."""
    mode = env_mode()
    if mode == "off":
        return False, quant, bits
    if mode == "int4":
        return True, "zero_aware", 4
    if mode == "int8":
        return True, "zero_aware", 8
    if mode == "none":
        return True, "none", bits
    return True, quant, bits
