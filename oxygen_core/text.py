"""Short, bounded renderings of text and lists that came from outside the process.

Any peer on the ROS graph can send a 1 MB image encoding, a 10 MB instruction or a
JointState with 100,000 names. Error messages, log lines and /diagnostics values that
quote such input must stay a few hundred bytes whatever arrives, or one message from a
peer turns into megabytes of log per frame. Everything that embeds user-supplied text
in a message goes through `excerpt` or `excerpt_list`, so the bound lives in one place.

It sits in oxygen_core so the model's tokenizer (which never imports ROS code) and the
ROS converters share it.
"""

from __future__ import annotations

from collections.abc import Iterable

EXCERPT_CHARS = 60  # characters of a string quoted in a message
EXCERPT_ITEMS = 8  # items of a list quoted in a message


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`repr` of text, cut to `limit` characters with its full length when longer.

    >>> excerpt("abc")
    "'abc'"
    >>> excerpt("x" * 1_000, 3)
    "'xxx...' (1000 chars)"
    """
    text = str(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit] + '...'!r} ({len(text)} chars)"


def excerpt_list(items: Iterable[object], limit: int = EXCERPT_ITEMS) -> str:
    """The first `limit` items (each an excerpt) and the total count when there are more.

    >>> excerpt_list(["a", "b"])
    "['a', 'b']"
    >>> excerpt_list([f"j{i}" for i in range(100_000)], 2)
    "['j0', 'j1', ... (100000 items)]"
    """
    items = list(items)
    shown = ", ".join(excerpt(str(item)) for item in items[:limit])
    if len(items) <= limit:
        return f"[{shown}]"
    return f"[{shown}, ... ({len(items)} items)]"
