"""Reading definition files: the one TOML reader (:func:`load_toml`), ``--set`` overrides
(:func:`parse_override`, :func:`apply_overrides`). Errors name the file and the key."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .section import SourceFile

__all__ = ["load_toml", "parse_override", "apply_overrides"]


def load_toml(path, overrides=(), text: str | None = None) -> tuple[dict, SourceFile]:
    """Read a TOML file (or parse ``text`` as if it were that file, e.g. the verbatim copy kept
    in a run's store); apply ``--set`` overrides. Errors name the file."""
    p = Path(path)
    if text is None:
        if p.is_dir():
            raise ConfigError(str(path), "", "is a directory, expected a file")
        if not p.is_file():
            raise ConfigError(str(path), "", "file not found")
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ConfigError(str(path), "", f"cannot read: {e.strerror or e}") from None
        text = _decode_text(raw, str(path))
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), "", f"not valid TOML: {e}") from None
    apply_overrides(doc, overrides, str(path))
    return doc, SourceFile(str(path), text, hashlib.sha256(text.encode()).hexdigest())


def _decode_text(raw: bytes, path: str) -> str:
    """UTF-8 text of a definition file; a binary file (NUL bytes, invalid UTF-8) is a
    ConfigError naming the path."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ConfigError(path, "", f"not a text TOML file (NUL byte at offset {nul})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(path, "", f"not a text TOML file (invalid UTF-8 at byte {e.start})") from None


def parse_override(item: str, source: str = "--set") -> tuple[str, Any]:
    """``"a.b=1.5"`` -> ("a.b", 1.5). Values are TOML values; bare words become strings."""
    if "=" not in item:
        raise ConfigError(source, item, "an override must look like dotted.key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(source, item, "empty key in override")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def apply_overrides(doc: dict, overrides, source: str) -> None:
    """Apply ``--set`` overrides in place. ``a.b[1].c=v`` addresses an entry of an array of
    tables. Overriding a table, or a key inside a non-table, is an error; new keys are allowed
    here and checked by the schema like any other."""
    for item in overrides:
        key, value = parse_override(item, f"{source} (--set)")
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            name, index = _split_index(part, key, source)
            nxt = node.setdefault(name, {}) if index is None else node.get(name)
            if index is not None:
                if not isinstance(nxt, list) or not -len(nxt) <= index < len(nxt) or not isinstance(nxt[index], dict):
                    raise ConfigError(f"{source} (--set)", key, f"{name}[{index}] is not an entry of an array of tables")
                nxt = nxt[index]
            if not isinstance(nxt, dict):
                raise ConfigError(f"{source} (--set)", key, f"{part!r} is not a table")
            node = nxt
        if isinstance(node.get(parts[-1]), dict):
            raise ConfigError(f"{source} (--set)", key, "is a table; set one of its keys")
        node[parts[-1]] = value


def _split_index(part: str, key: str, source: str) -> tuple[str, int | None]:
    if not part.endswith("]"):
        return part, None
    name, _, idx = part[:-1].partition("[")
    try:
        return name, int(idx)
    except ValueError:
        raise ConfigError(f"{source} (--set)", key, f"bad index in {part!r}") from None
