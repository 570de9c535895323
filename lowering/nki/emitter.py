"""Line emitter with slots. A slot is an empty block left at a position (right after a value is
defined) that later code can fill: a transpose or broadcast of a value is written once, next to
the value, and every later use (also inside loops) reuses it. Lines carry `# src: file:LINE`
comments pointing at the user's kernel."""
from __future__ import annotations

from kernel_dsl.errors import SourceLoc


class Block:
    """Lines and nested blocks at one indentation level."""

    def __init__(self, indent: int):
        self.indent = indent
        self.items: list[str | Block] = []

    def render(self, out: list[str]) -> None:
        for item in self.items:
            if isinstance(item, Block):
                item.render(out)
            else:
                out.append(item)


class Emitter:
    def __init__(self, indent: int = 1):
        self.root = Block(indent)
        self.stack = [self.root]
        self._last: tuple[str, int] | None = None
        self._saved: list[tuple[str, int] | None] = []

    @property
    def block(self) -> Block:
        return self.stack[-1]

    def line(self, text: str, loc: SourceLoc | None = None, comment: str = "") -> None:
        note = comment
        if loc is not None and (loc.file, loc.line) != self._last:
            note = f"src: {loc.short()}" + (f"; {comment}" if comment else "")
            self._last = (loc.file, loc.line)
        pad = "    " * self.block.indent
        self.block.items.append(pad + text + (f"  # {note}" if note else ""))

    def blank(self) -> None:
        self.block.items.append("")

    def slot(self) -> Block:
        """An empty block at the current position, to be filled later."""
        b = Block(self.block.indent)
        self.block.items.append(b)
        return b

    def push(self, block: Block) -> None:
        """Writes into `block` (a slot) until `pop`; its first line gets its own `# src:`."""
        self.stack.append(block)
        self._saved.append(self._last)
        self._last = None

    def pop(self) -> None:
        self.stack.pop()
        self._last = self._saved.pop()

    def open(self, header: str, loc: SourceLoc | None = None, comment: str = "") -> None:
        """`header:` then an indented block (closed with `close`)."""
        self.line(header, loc, comment)
        b = Block(self.block.indent + 1)
        self.block.items.append(b)
        self.stack.append(b)

    def close(self) -> None:
        self.stack.pop()

    def lines(self) -> list[str]:
        out: list[str] = []
        self.root.render(out)
        return out
