"""JSON instances for a JSON schema: what the demo teacher answers to a ``json_schema`` request or puts in a call's
arguments when the request is not one of its workloads.

``instance_for(schema, seed)`` builds a candidate from the schema's keywords (``type``, ``properties``,
``required``, ``items``/``prefixItems``, ``enum``/``const``, ``anyOf``/``oneOf``/``allOf``, local ``$ref``,
string ``format``/``pattern``/lengths, numeric bounds and ``multipleOf``, array/object sizes), checks it with
``jsonschema`` and tries again with another branch and another seed when it fails (``not``, ``uniqueItems``,
``if``/``then`` and the like are met by search, not construction). Deterministic in (schema, seed). Patterns
are generated from Python's own regex parser (``re._parser``), which reads the ECMA-262 subset schemas use.
"""

from __future__ import annotations

import random
import re
import uuid
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator, validators

ATTEMPTS = 24
_MAX_DEPTH = 12
_FORMATS = {
    "date": "2024-01-15",
    "date-time": "2024-01-15T12:00:00Z",
    "time": "12:00:00Z",
    "duration": "P1D",
    "email": "demo@example.com",
    "idn-email": "demo@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/demo",
    "uri-reference": "/demo",
    "iri": "https://example.com/demo",
    "url": "https://example.com/demo",
    "json-pointer": "/demo",
    "regex": "^demo$",
}
_WORDS = ("demo", "alpha", "beta", "gamma", "delta", "omega", "sample", "value")


class _Gen:
    def __init__(self, root: Any, rng: random.Random, attempt: int) -> None:
        self.root = root
        self.rng = rng
        self.attempt = attempt

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return {}
        node = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return {}
        return node

    def value(self, schema: Any, depth: int = 0) -> Any:
        if schema is True or schema == {} or depth > _MAX_DEPTH:
            return "demo" if depth <= _MAX_DEPTH else None
        if not isinstance(schema, dict):
            return None
        if "$ref" in schema:
            merged = {**self.resolve(schema["$ref"]), **{k: v for k, v in schema.items() if k != "$ref"}}
            return self.value(merged, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"]) if self.attempt else schema["enum"][0]
        if isinstance(schema.get("allOf"), list):
            merged = dict(schema)
            for part in merged.pop("allOf"):
                part = self.resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                if isinstance(part, dict):
                    for k, v in part.items():
                        if k == "properties":
                            merged["properties"] = {**merged.get("properties", {}), **v}
                        elif k == "required":
                            merged["required"] = [*merged.get("required", []), *v]
                        else:
                            merged.setdefault(k, v)
            return self.value(merged, depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                branches = schema[key]
                branch = branches[(self.attempt + self.rng.randrange(len(branches))) % len(branches)]
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value({**rest, **branch} if isinstance(branch, dict) else branch, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"] or ["null"]
            kind = kinds[self.attempt % len(kinds)]
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        return getattr(self, f"_{kind}", self._string)(schema, depth)

    def _object(self, schema: dict, depth: int) -> dict:
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        out = {name: self.value(sub, depth + 1) for name, sub in props.items()}
        for name in schema.get("required") or []:
            if name not in out:
                extra = schema.get("additionalProperties")
                out[name] = self.value(extra if isinstance(extra, dict) else {"type": "string"}, depth + 1)
        want = schema.get("minProperties") or 0
        i = 0
        while len(out) < want:
            out[f"extra_{i}"] = self.value(
                schema.get("additionalProperties") or {"type": "string"}, depth + 1
            )
            i += 1
        cap = schema.get("maxProperties")
        if isinstance(cap, int) and len(out) > cap:
            keep = [*(schema.get("required") or []), *out]
            out = {k: out[k] for k in dict.fromkeys(keep) if k in out}
            out = dict(list(out.items())[:cap])
        return out

    def _array(self, schema: dict, depth: int) -> list:
        prefix = schema.get("prefixItems") or (
            schema.get("items") if isinstance(schema.get("items"), list) else []
        )
        items = schema.get("items") if isinstance(schema.get("items"), dict | bool) else {}
        low = max(int(schema.get("minItems") or 0), len(prefix), 1 if self.attempt % 2 == 0 else 0)
        high = schema.get("maxItems")
        n = min(low, high) if isinstance(high, int) else low
        if items is False:
            n = min(n, len(prefix))
        return [self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(n)]

    def _string(self, schema: dict, depth: int) -> str:
        fmt = schema.get("format")
        if fmt == "uuid":
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if isinstance(schema.get("pattern"), str):
            text = _from_pattern(schema["pattern"], self.rng)
            if text is not None:
                return text
        text = _FORMATS.get(fmt) or " ".join(self.rng.choice(_WORDS) for _ in range(1 + self.attempt % 3))
        low, high = int(schema.get("minLength") or 0), schema.get("maxLength")
        if len(text) < low:
            text = (text + " demo" * low)[:low]
        if isinstance(high, int) and len(text) > high:
            text = text[:high]
        return text

    def _number(self, schema: dict, depth: int, integer: bool = False) -> int | float:
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        step = schema.get("multipleOf")
        if low is None and high is None:
            base: float = self.rng.randint(1, 100)
        elif low is None:
            base = high - self.rng.randint(1, 10)
        elif high is None:
            base = low + self.rng.randint(1, 10)
        else:
            base = low + (high - low) * (0.25 + 0.5 * self.rng.random())
        if isinstance(step, int | float) and step > 0:
            k = round(base / step)
            candidates = [k * step, (k + 1) * step, (k - 1) * step]
            base = next((c for c in candidates if _within(c, schema)), candidates[0])
        if integer:
            return int(round(base)) if _within(round(base), schema) else int(base)
        return float(base) if not isinstance(step, int) else base

    def _integer(self, schema: dict, depth: int) -> int:
        return int(self._number(schema, depth, integer=True))

    def _boolean(self, schema: dict, depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict, depth: int) -> None:
        return None


def _within(x: float, schema: dict) -> bool:
    checks = (
        ("minimum", lambda b: x >= b),
        ("maximum", lambda b: x <= b),
        ("exclusiveMinimum", lambda b: x > b),
        ("exclusiveMaximum", lambda b: x < b),
    )
    return all(check(schema[k]) for k, check in checks if isinstance(schema.get(k), int | float))


# Strings for a regular expression -------------------------------------------------------------------------------
_CATEGORY_CHARS = {"CATEGORY_DIGIT": "0123456789", "CATEGORY_WORD": "abcxyz019_", "CATEGORY_SPACE": " "}
_PRINTABLE = [chr(c) for c in range(0x21, 0x7F)]


def _from_pattern(pattern: str, rng: random.Random) -> str | None:
    """A string matching `pattern` (searched, as JSON Schema does), or None when the generator cannot tell."""
    try:
        parsed = re._parser.parse(pattern)  # type: ignore[attr-defined]
        text = _emit(list(parsed), rng)
    except (re.error, KeyError, ValueError, RecursionError):
        return None
    return text if re.search(pattern, text) else None


def _emit(items: list, rng: random.Random) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("x")
        elif name == "IN":
            out.append(_pick_in(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            n = low if high == low else min(high, low + rng.randint(0, 2) + (1 if low == 0 else 0))
            out.extend(_emit(list(sub), rng) for _ in range(n))
        elif name == "SUBPATTERN":
            out.append(_emit(list(arg[-1]), rng))
        elif name == "BRANCH":
            out.append(_emit(list(rng.choice(arg[1])), rng))
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORY_CHARS.get(str(arg), "a")))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:
            raise ValueError(f"pattern element {name} is not generated")
    return "".join(out)


def _pick_in(items: list, rng: random.Random) -> str:
    negate = any(str(op) == "NEGATE" for op, _ in items)
    allowed: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            allowed.append(chr(arg))
        elif name == "RANGE":
            allowed.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 200) + 1))
        elif name == "CATEGORY":
            allowed.extend(_CATEGORY_CHARS.get(str(arg), "a"))
    if negate:
        allowed = [c for c in _PRINTABLE if c not in set(allowed)]
    return rng.choice(allowed) if allowed else "a"


# The entry point ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    cls = validators.validator_for(schema, default=Draft202012Validator)
    return cls(schema)


def instance_for(schema: Any, seed: str = "") -> Any:
    """A JSON value valid for `schema` (deterministic in schema and seed). When no attempt validates (a schema
    that is unsatisfiable or beyond this generator), the first candidate is returned."""
    if not isinstance(schema, dict | bool):
        return {}
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    try:
        check = _validator(key).is_valid
    except Exception:  # a schema jsonschema cannot load: nothing to check against
        check = None
    first: Any = None
    for attempt in range(ATTEMPTS):
        candidate = _Gen(schema, random.Random(f"{seed}:{attempt}"), attempt).value(schema)
        if attempt == 0:
            first = candidate
        try:
            if check is None or check(candidate):
                return candidate
        except Exception:  # an unresolvable $ref while checking: take the construction as it is
            return candidate
    return first
