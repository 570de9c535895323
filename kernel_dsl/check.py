"""Results of checking a kernel with a backend's real compiler (`kernel.check`, `kdsl check`)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# error classes, in the words the report uses
BLOCK_RULE = "block-rule"  # a block shape the hardware's tiling rules reject
UNSUPPORTED = "unsupported"  # a primitive or layout the compiler does not implement
VMEM_OVERFLOW = "vmem-overflow"
TIMEOUT = "timeout"
CRASH = "compiler-crash"  # the compiler process died
ERROR = "error"  # anything else the compiler said
BUDGET = "budget"  # not compiled, or cut short: the autotune budget ran out first


@dataclass
class CheckEntry:
    target: str
    status: str  # "ok" | "failed"
    config: str
    error_class: str | None = None
    message: str = ""
    # bytes, from the compiler: when ok, what the kernel needs (the smallest vmem_limit_bytes it
    # accepts; None if not measured or any limit compiles); on a VMEM overflow, what it asked for
    vmem_used: int | None = None
    vmem_limit: int | None = None
    vmem_estimate: int | None = None  # bytes, analytical
    compile_s: float = 0.0
    stage: str = ""  # which check decided: "lower" (export, no libtpu) or "compile" (libtpu)
    source_line: str | None = None  # the user's line the error maps to, where one does
    hint: str = ""  # what to do about the error, where known
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class CheckReport:
    kernel: str
    shapes: str
    entries: list[CheckEntry]

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.entries)

    def __getitem__(self, target: str) -> CheckEntry:
        return next(e for e in self.entries if e.target == target)

    def to_json(self) -> str:
        return json.dumps({"kernel": self.kernel, "shapes": self.shapes, "ok": self.ok,
                           "entries": [asdict(e) for e in self.entries]}, indent=2)

    def table(self) -> str:
        def mib(b: int | None) -> str:
            return "-" if b is None else f"{b / 2**20:.2f}"

        head = f"{'target':<10} {'status':<7} {'class':<14} {'VMEM MiB':>9} {'limit':>7} " \
               f"{'estimate':>9} {'compile s':>9}  message"
        rows = [f"kernel {self.kernel} ({self.shapes})", head, "-" * len(head)]
        for e in self.entries:
            msg = e.message.splitlines()[0][:90] if e.message else ""
            if e.source_line:
                msg = f"{e.source_line}: {msg}"
            if e.hint:
                msg = f"{msg} (hint: {e.hint})"
            rows.append(f"{e.target:<10} {e.status:<7} {e.error_class or '-':<14} "
                        f"{mib(e.vmem_used):>9} {mib(e.vmem_limit):>7} {mib(e.vmem_estimate):>9} "
                        f"{e.compile_s:>9.2f}  {msg}")
        rows.append("all targets compile" if self.ok else "FAILED on: " +
                    ", ".join(e.target for e in self.entries if not e.ok))
        return "\n".join(rows)
