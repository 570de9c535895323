"""Sorting Pallas / Mosaic / XLA:TPU error messages into the check report's error classes."""
from __future__ import annotations

import re

from kernel_dsl.check import BLOCK_RULE, ERROR, UNSUPPORTED, VMEM_OVERFLOW

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "": 1}
_BLOCK_RULE = re.compile(r"block shape|divisible by 8 and 128|_check_block_mappings|"
                         r"last two dimensions of your block", re.I)
_UNSUPPORTED = re.compile(r"Unimplemented primitive|not implemented|unsupported|not supported|"
                          r"Invalid vector type|"
                          r"NotImplementedError|cannot lower|failed to legalize", re.I)
_VMEM = re.compile(r"vmem|scoped allocation|CompileTimeScopedVmemOom", re.I)


def classify(message: str, stage: str) -> str:
    if _BLOCK_RULE.search(message):
        return BLOCK_RULE
    if "RESOURCE_EXHAUSTED" in message and _VMEM.search(message):
        return VMEM_OVERFLOW
    if _UNSUPPORTED.search(message):
        return UNSUPPORTED
    return ERROR


def _bytes(num: str, unit: str) -> int:
    return int(round(float(num) * _UNITS[unit]))


def parse_vmem(message: str) -> tuple[int | None, int | None]:
    """(used, limit) bytes from a VMEM overflow message, in the formats libtpu uses."""
    m = re.search(r"size ([\d.]+)([KMG]?) and limit ([\d.]+)([KMG]?)", message)
    if m:
        return _bytes(m.group(1), m.group(2)), _bytes(m.group(3), m.group(4))
    m = re.search(r"Used ([\d.]+)([KMG]?) of ([\d.]+)([KMG]?)", message)
    if m:
        return _bytes(m.group(1), m.group(2)), _bytes(m.group(3), m.group(4))
    m = re.search(r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\)", message)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None, None


def hint_for(message: str, cls: str) -> str:
    """What to do about a compiler error, where we know."""
    if "xf16>" in message or "xf16," in message:
        return "float16 has no vector type on TPU: use bfloat16 (or float32) tensors"
    if cls == BLOCK_RULE:
        return ("block sizes on the last two dims must be multiples of (8, 128) (16 rows for "
                "16-bit dtypes) or the whole dim: pick another config, or leave block sizes free")
    if cls == VMEM_OVERFLOW:
        return "the tiles do not fit this chip's VMEM: use smaller block sizes on this target"
    if "Sublane gather" in message:
        return "this generation cannot move this vector layout; please report the kernel"
    return ""
