"""Human-readable sizes and durations for console lines."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every non-printable character (terminal escapes such as ESC and the C1 controls,
    bidirectional overrides, NUL...) written as a visible escape (`\\x1b`, `\\u202e`), so a file name or a
    reason read from a file cannot retitle, recolour or hyperlink the user's terminal. Newlines (and tabs)
    stay when `keep_newlines` (a traceback); a single-line field escapes them too."""
    if text.isprintable():
        return text
    keep = "\n\t" if keep_newlines else ""
    return "".join(c if c.isprintable() or c in keep else (f"\\x{ord(c):02x}" if ord(c) < 256 else
                                                            f"\\u{ord(c):04x}" if ord(c) < 0x10000 else
                                                            f"\\U{ord(c):08x}") for c in text)


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 input`, `2 inputs`, `1,000 inputs` (`many` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
