"""The indented text form of `system_profiler` as a tree of titled sections.

A line ending in ":" opens a section; "Key: Value" lines are fields of the
nearest open section indented less than they are. Indentation is not regular
(a Thunderbolt peer sits between its port's fields and the bus), so nesting
only follows "indented further than".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from node_agent.hardware.errors import HardwareParseError

_LINES_MAX = 100_000  # real outputs are a few hundred lines


@dataclass(frozen=True)
class TextSection:
    title: str  # "" for the document itself
    fields: tuple[tuple[str, str], ...]
    children: tuple[TextSection, ...]
    loose_lines: tuple[str, ...]  # lines that are neither fields nor titles

    def field(self, key: str) -> str | None:
        """The first value of key among this section's own fields (case-insensitive)."""
        wanted = key.lower()
        return next((value for name, value in self.fields if name.lower() == wanted), None)

    def walk(self) -> Iterator[TextSection]:
        """This section and every section below it, depth first, in document order."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class _OpenSection:
    title: str
    indent: int
    fields: list[tuple[str, str]] = field(default_factory=list)
    children: list[_OpenSection] = field(default_factory=list)
    loose_lines: list[str] = field(default_factory=list)

    def freeze(self) -> TextSection:
        children = tuple(child.freeze() for child in self.children)
        return TextSection(self.title, tuple(self.fields), children, tuple(self.loose_lines))


def parse_sections(text: str) -> TextSection:
    """Parse system_profiler text output into its section tree."""
    lines = text.expandtabs(4).splitlines()
    if len(lines) > _LINES_MAX:
        raise HardwareParseError(f"system_profiler text has {len(lines)} lines, over {_LINES_MAX}")
    root = _OpenSection(title="", indent=-1)
    stack = [root]
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack[-1].indent >= indent:
            stack.pop()
        parent = stack[-1]
        if line.endswith(":"):
            section = _OpenSection(title=line[:-1].strip(), indent=indent)
            parent.children.append(section)
            stack.append(section)
        elif ": " in line:
            key, value = line.split(": ", 1)
            parent.fields.append((key.strip(), value.strip()))
        else:
            parent.loose_lines.append(line)
    return _freeze(root)


def _freeze(root: _OpenSection) -> TextSection:
    # Freezing recurses once per nesting level; deeply indented junk must not
    # blow the stack, so refuse absurd depths first.
    depth, pending = 0, [(root, 0)]
    while pending:
        section, level = pending.pop()
        depth = max(depth, level)
        pending.extend((child, level + 1) for child in section.children)
    if depth > 64:
        raise HardwareParseError(f"system_profiler text nests {depth} levels deep")
    return root.freeze()
