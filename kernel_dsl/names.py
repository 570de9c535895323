"""ASCII identifiers for user names that are not ones (`my-kernel`, `<lambda>`, `2x`, `ядро`).

Generated source, linecache file names and torch op names (`kernel_dsl::<name>`, which torch's
schema parser reads as ASCII) all need one; `kernel.name` keeps the user's name for messages."""
from __future__ import annotations

import keyword


def identifier(name: str) -> str:
    """Deterministic: ASCII letters, digits and `_` stay; other ASCII becomes `_`; a non-ASCII
    character becomes `u` and its hex code point (so different scripts do not collide); a name
    that would start with a digit, or is empty, gets a `k_` prefix; a keyword gets a `_`."""
    out = "".join(c if c.isascii() and (c.isalnum() or c == "_") else
                  "_" if c.isascii() else f"u{ord(c):04x}" for c in name)
    if not out or out[0].isdigit():
        out = "k_" + out
    return out + "_" if keyword.iskeyword(out) else out
