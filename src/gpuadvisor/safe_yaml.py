"""Reading user-written YAML/JSON with bounds: size, aliases, nesting, duplicate keys, undecodable bytes.

PyYAML's safe loader still expands aliases without limit (a "billion laughs" file of a few hundred
bytes grows to gigabytes) and silently keeps the last of two equal keys. `load_user_yaml` refuses
both, plus files above MAX_BYTES and bytes that are not UTF-8 text, each with a one-line UserError
naming the file and line. Bundled knowledge files are trusted: `load_bundled_yaml` reads them with
the safe loader, through libyaml where PyYAML has it (the pure-Python parser took ~0.15 s of the
0.65 s `suggest --model 1.5B`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import yaml

from .errors import UserError

MAX_BYTES = 4 * 1024 * 1024  # a cluster file of 10,000 nodes written out in full is ~2 MB
MAX_ALIASES = 100  # a hand-written file uses a handful (&defaults / *defaults)
MAX_NODES = 1_000_000  # scalars + collections after alias expansion
MAX_DEPTH = 64

# libyaml's parser with the safe constructor: same documents, same types, ~10x faster
_BundledLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_bundled_yaml(stream: Any) -> Any:
    """yaml.safe_load for the trusted files shipped in knowledge/ (text or an open file)."""
    return yaml.load(stream, Loader=_BundledLoader)  # noqa: S506 - a safe loader


class _Limited(yaml.SafeLoader):
    """SafeLoader that counts alias uses and built nodes, and refuses duplicate mapping keys."""

    def __init__(self, stream: str, where: str):
        super().__init__(stream)
        self.where = where
        self.aliases = 0

    def _fail(self, node: Optional[yaml.Node], msg: str) -> UserError:
        line = f" line {node.start_mark.line + 1}" if node is not None and node.start_mark else ""
        return UserError(f"{self.where}{line}: {msg}")

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise self._fail(None, f"more than {MAX_ALIASES} YAML aliases (*name); write the values out")
        depth = getattr(self, "_depth", 0) + 1
        if depth > MAX_DEPTH:
            raise self._fail(None, f"nested deeper than {MAX_DEPTH} levels; flatten the file")
        self._depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth - 1

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise self._fail(key_node, "a mapping key must be a plain value") from None
                if key in seen:
                    raise self._fail(key_node, f"key '{key}' appears twice in one mapping (first on line "
                                               f"{seen[key]}); keep one")
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def check_size(self, root: yaml.Node) -> None:
        """Refuse a document whose values, with aliases expanded, number more than MAX_NODES."""
        memo: dict[int, int] = {}

        def size(node: yaml.Node) -> int:
            key = id(node)
            if key not in memo:
                memo[key] = 0  # a recursive alias counts once (the constructor refuses it anyway)
                if isinstance(node, yaml.MappingNode):
                    total = 1 + sum(size(k) + size(v) for k, v in node.value)
                elif isinstance(node, yaml.SequenceNode):
                    total = 1 + sum(size(v) for v in node.value)
                else:
                    total = 1
                memo[key] = total
                if total > MAX_NODES:
                    raise self._fail(node, f"expands to more than {MAX_NODES:,} values (YAML aliases?); "
                                           "write it out plainly")
            return memo[key]

        size(root)


def read_user_text(path: Union[str, Path], what: str = "file", *, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a user file, or a one-line UserError (missing, too large, binary, undecodable)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise UserError(f"{what} '{p}' is {size / 2**20:.1f} MiB, above the {max_bytes // 2**20} MiB limit; "
                            "is it the right file?")
        raw = p.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what} '{p}': {exc.strerror or exc}; check the path") from None
    if b"\x00" in raw[:8192]:
        raise UserError(f"{what} '{p}' is a binary file, not YAML/JSON text; give the text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} '{p}' is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def load_user_yaml(text: str, where: str) -> Any:
    """Parse YAML/JSON `text` with the limits above; `where` (a file name) starts every error."""
    return load_user_yaml_node(text, where)[0]


def load_user_yaml_node(text: str, where: str) -> tuple[Any, Optional[yaml.Node]]:
    """(data, composed node tree for line numbers), parsed once with the limits above."""
    loader = None
    try:
        loader = _Limited(text, where)  # the reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None, None
        loader.check_size(node)
        return loader.construct_document(node), node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where} line {mark.line + 1}" if mark else where
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{at}: not valid YAML/JSON ({problem}); fix the syntax") from None
    except RecursionError:
        raise UserError(f"{where}: nested too deeply; flatten the file") from None
    finally:
        if loader is not None:
            loader.dispose()


__all__ = ["load_bundled_yaml", "load_user_yaml", "load_user_yaml_node", "read_user_text", "MAX_BYTES", "MAX_ALIASES",
           "MAX_NODES"]
