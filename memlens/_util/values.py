"""Setting values the schema's types let through: loose booleans, non-finite and huge numbers.

OmegaConf converts generously.  A ``bool`` field takes ``no``, ``off``, ``1`` or ``2`` from the
command line (``2`` becomes ``True``); a ``float`` field takes ``nan`` and ``inf``; an ``int``
field takes ``2**70``.  None of these is a setting anyone means, and each surfaces late or
never: a ``nan`` threshold compares false with everything, a 70-bit integer overflows the first
numpy array it reaches.  This module is the strict reading on top of the schema:

* **booleans** (:func:`check_booleans`): on the command line a boolean setting is ``true`` or
  ``false`` (Hydra's grammar reads these, in any case, as booleans) or ``null`` where the
  setting may be null; ``no``, ``off``, ``1``, ``yes`` and anything else are refused with the
  setting's name, so a spelling can never silently mean something.  In a YAML file the YAML
  loader has already read ``true``/``false`` (and YAML 1.1's ``yes``/``no``/``on``/``off``,
  as OmegaConf loads them) as booleans; a number or a quoted string there is refused too.
* **numbers** (:func:`check_numbers` over a resolved settings object, :func:`number` for one
  value with a range): every float finite, every int within a signed 64-bit integer.

Errors are ``ValueError`` naming the setting; the commands report them as one ``error:`` line
with exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator

from omegaconf import DictConfig, OmegaConf
from omegaconf.nodes import BooleanNode

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------------------- numbers
def _shown(x: float) -> str:
    if isinstance(x, int) and x >= 2**32 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def number(key: str, value, low: float | None = None, high: float | None = None, *,
           above: float | None = None, below: float | None = None,
           integer: bool = False) -> None:  # fmt: skip
    """Refuse ``value`` unless it is a finite number (``integer``: an int within 64 bits) with
    ``low <= value <= high``, ``value > above``, ``value < below`` (each bound when given)."""
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ValueError(f"{key} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value}")
    if integer and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{key} must fit in a signed 64-bit integer, got {value}")
    for bound, holds, text in (
        (low, lambda b: value >= b, ">="),
        (above, lambda b: value > b, ">"),
        (high, lambda b: value <= b, "<="),
        (below, lambda b: value < b, "<"),
    ):
        if bound is not None and not holds(bound):
            raise ValueError(f"{key} must be {text} {_shown(bound)}, got {value}")


def _values(obj, key: str) -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every leaf of a resolved settings object."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _values(getattr(obj, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _values(v, f"{key}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _values(v, f"{key}[{i}]")
    else:
        yield key, obj


def check_numbers(obj, prefix: str = "") -> None:
    """Every float of ``obj`` (a resolved settings dataclass, nested) finite, every int within
    64 bits; raises ``ValueError`` naming the first that is not."""
    for key, value in _values(obj, prefix):
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, got {value}")
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{key} must fit in a signed 64-bit integer, got {value}")


# --------------------------------------------------------------------------- booleans
def _has(node, key: str) -> bool:
    """Is ``node`` a dict node holding ``key`` (a null or ``???`` dict holds nothing)?"""
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
        return False
    return not node._is_interpolation() and key in node


def _node(cfg, dotted: str):
    """The config node at ``dotted`` (``a.b.c``), or None."""
    node = cfg
    for part in dotted.split("."):
        if not _has(node, part):
            return None
        node = node._get_node(part)
    return node


def _strict(raw) -> bool:
    """Is ``raw`` (an unconverted value) an acceptable value of a boolean setting?"""
    if isinstance(raw, str):  # a quoted 'true', or an interpolation (checked once resolved)
        return raw.lower() in ("true", "false") or "${" in raw
    return isinstance(raw, bool) or raw is None


def _check_value(node, raw, key: str, where: str = "") -> None:
    if isinstance(node, BooleanNode):
        if not _strict(raw):
            shown = repr(raw) if isinstance(raw, str) else str(raw)
            allowed = "true, false or null" if node._is_optional() else "true or false"
            raise ValueError(f"{key} must be {allowed}, got {shown}{where}")
    elif isinstance(raw, dict):
        for k, v in raw.items():
            if isinstance(k, str) and _has(node, k):
                _check_value(node._get_node(k), v, f"{key}.{k}", where)


def check_override_booleans(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """Command-line ``key=value`` overrides of boolean settings: ``true``/``false`` only."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group.split("@")[0]
        if o.is_delete() or o.is_sweep_override() or key.startswith("hydra"):
            continue
        _check_value(_node(cfg, key), o.value(), key)


def _leaves(node, path: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, raw value) of every scalar of a loaded YAML config (lists skipped)."""
    for k in node.keys():
        if not path and k in ("defaults", "hydra"):
            continue
        child, key = node._get_node(k), f"{path}.{k}" if path else str(k)
        if isinstance(child, DictConfig) and not child._is_none():
            yield from _leaves(child, key)
        elif not OmegaConf.is_list(child):
            yield key, child._value()


def _package(header: dict, group: str) -> str:
    """The key prefix a group option's file is merged under (its ``@package`` header)."""
    package = header.get("package") or "_group_"
    package = package.replace("_group_", group.replace("/", "."))
    if package == "_global_":
        return ""
    return package.removeprefix("_global_.") + "."


def check_file_booleans(cfg: DictConfig, choices: dict, repository) -> None:
    """Boolean settings in the YAML files of the chosen config-group options (``policy=...``,
    ``experiment=...``): a number or a string there is refused, naming the file."""
    for group, option in choices.items():
        if option is None or group.startswith("hydra"):
            continue
        loaded = repository.load_config(f"{group}/{option}")
        if loaded is None or not isinstance(loaded.config, DictConfig):
            continue
        prefix = _package(loaded.header, group)
        for key, raw in _leaves(loaded.config):
            _check_value(_node(cfg, prefix + key), raw, prefix + key, f" (in {group}/{option})")
