"""Render ``${...}`` templates in task parameters with a small, safe expression language.

A template is any string. ``$$`` is a literal ``$``; ``${expr}`` is replaced by the string
form of ``expr`` (``null`` as ``""``, booleans as ``true``/``false``, lists and mappings as
compact JSON); an unclosed ``${`` is left as written. A string that is exactly one
``${expr}`` renders to the expression's native value (a number, a mapping, ...).

Grammar, loosest binding first::

    expr     := or ( "?" expr ":" expr )?
    or       := and ( "||" and )*                 JavaScript truthiness; returns an operand
    and      := equality ( "&&" equality )*
    equality := compare ( ("==" | "!=" | "===" | "!==") compare )*
    compare  := additive ( ("<" | "<=" | ">" | ">=") additive )*     numbers or strings
    additive := term ( ("+" | "-") term )*         "+" with a string operand concatenates
    term     := unary ( ("*" | "/" | "%") unary )*
    unary    := ("-" | "+" | "!" | "typeof" | "void") unary | postfix
    postfix  := primary ( "." NAME | "[" expr "]" | "(" args ")" )*
    primary  := NUMBER | 'string' | "string" | true | false | null | undefined | NAME
              | "(" expr ")"

Calls are limited to ``JSON.stringify``, ``JSON.parse``, ``String``, ``Number``,
``Math.floor``, ``Math.ceil``, ``Math.round``, ``Math.min`` and ``Math.max``; lists and
strings have ``.length``. Nothing reaches Python's ``eval``.

``typeof x`` names the type of ``x`` as JavaScript does (``"undefined"`` for a variable or
key that does not exist, instead of an error), so ``typeof x === 'undefined' ? 'd' : x``
gives a default; ``void x`` is ``undefined``, ``+x`` is ``Number(x)``.

Variables are looked up lazily: a value that is itself a template is rendered against the
same context first (so ``b: ${a}`` works), and a name that needs itself is an error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from tickwork.shared.domain.expression_methods import (
    METHOD_NAMES,
    call_method,
    json_stringify,
    sized_text,
)
from tickwork.shared.domain.jsvalues import (
    UNDEFINED,
    is_number,
    normalize,
    to_number,
    to_text,
    truthy,
    type_of,
)
from tickwork.shared.domain.moments import NO_CLOCK, Moment, make_moment
from tickwork.shared.errors import InvalidExpression

Node = Callable[["_Scope"], Any]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_][\w]*)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op>===|!==|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.()\[\],]))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_LITERALS = {"true": True, "false": False, "null": None, "undefined": UNDEFINED}
_PREFIXES = ("!", "-", "+", "typeof", "void")
"""The unary operators; ``typeof`` and ``void`` are words, the others symbols."""


_is_number = is_number
_normalize = normalize
_truthy = truthy
_to_number = to_number

MAX_EXPRESSION_CHARS = 4096
"""The longest ``${...}`` expression; longer ones are refused when the file is parsed."""
MAX_NESTING_DEPTH = 64
"""How deeply brackets, calls and operators may nest in one expression."""


def _js_round(value: Any) -> int:
    return math.floor(_to_number(value) + 0.5)


def _json_parse(value: Any) -> Any:
    try:
        return json.loads(to_text(value))
    except json.JSONDecodeError as exc:
        raise InvalidExpression(f"JSON.parse: {exc}") from None


def _math_extreme(pick: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args: pick(_to_number(a) for a in args)


FUNCTIONS: dict[str, Callable[..., Any] | None] = {
    "JSON.stringify": json_stringify,
    "JSON.parse": _json_parse,
    "String": to_text,
    "Number": _to_number,
    "Math.floor": lambda v: math.floor(_to_number(v)),
    "Math.ceil": lambda v: math.ceil(_to_number(v)),
    "Math.round": _js_round,
    "Math.min": _math_extreme(min),
    "Math.max": _math_extreme(max),
    "Math.abs": lambda v: abs(_to_number(v)),
    "parseInt": lambda v: math.trunc(_to_number(v)),
    "parseFloat": _to_number,
    "Object.keys": lambda v: list(v) if isinstance(v, Mapping) else [],
    "moment": None,  # needs the workflow's time zone: built in _Parser._call
}
"""The only callables an expression can reach, by the dotted name it calls them with."""


def _arithmetic(op: str, left: Any, right: Any) -> Any:
    if op == "+" and (isinstance(left, str) or isinstance(right, str)):
        return sized_text(to_text(left) + to_text(right))
    if not (_is_number(left) and _is_number(right)):
        raise InvalidExpression(
            f"operator '{op}' needs numbers, got {to_text(left)!r} and {to_text(right)!r}"
        )
    if op == "+":
        return _js_number(left + right)
    if op == "-":
        return _js_number(left - right)
    if op == "*":
        return _js_number(left * right)
    if right == 0:
        raise InvalidExpression(f"division by zero in '{op}'")
    if op == "/":
        return _normalize(left / right)
    return _normalize(math.fmod(left, right))


MAX_SAFE_INTEGER = 2**53 - 1
"""JavaScript's largest exact integer: past it a result is a float, as in JavaScript, so
that chained products cannot grow into numbers of millions of digits."""


def _js_number(value: Any) -> Any:
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        try:
            return _normalize(float(value))  # rounded to a double, shown whole as before
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


def _negate(value: Any) -> int | float:
    if not _is_number(value):
        raise InvalidExpression(f"operator '-' needs a number, got {to_text(value)!r}")
    return -value  # type: ignore[no-any-return]


class _Missing(InvalidExpression):
    """A variable or key that does not exist (``typeof`` reads it as ``undefined``)."""


def _typeof(operand: Node) -> Node:
    def evaluate(scope: _Scope) -> str:
        try:
            return type_of(operand(scope))
        except _Missing:
            return "undefined"

    return evaluate


def _void(operand: Node) -> Node:
    def evaluate(scope: _Scope) -> Any:
        operand(scope)
        return UNDEFINED

    return evaluate


def _equal(op: str, left: Any, right: Any) -> bool:
    """``==`` and ``===`` (the same but for ``null == undefined``, true only for ``==``)."""
    if op == "==" and left in (None, UNDEFINED) and right in (None, UNDEFINED):
        return True
    return bool(left == right)


def _compare(op: str, left: Any, right: Any) -> bool:
    if op in ("==", "==="):
        return _equal(op, left, right)
    if op in ("!=", "!=="):
        return not _equal(op.replace("!", "=", 1), left, right)
    same_kind = (_is_number(left) and _is_number(right)) or (
        isinstance(left, str) and isinstance(right, str)
    )
    if not same_kind:
        raise InvalidExpression(f"cannot compare {to_text(left)!r} {op} {to_text(right)!r}")
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _member(target: Any, key: Any, path: str) -> Any:
    if isinstance(target, Mapping):
        if isinstance(key, str) and key in target:
            return target[key]
        raise _Missing(f"'{path}' has no key {to_text(key)!r}")
    if isinstance(target, list | tuple | str):
        if key == "length":
            return len(target)
        if _is_number(key) and key == int(key) and 0 <= int(key) < len(target):
            return target[int(key)]
        raise InvalidExpression(f"'{path}' has no element {to_text(key)!r}")
    raise InvalidExpression(f"cannot read {to_text(key)!r} of '{path}' ({to_text(target)!r})")


def _describe(token: str) -> str:
    return repr(token) if token else "the end"


def _constant(value: Any) -> Node:
    return lambda s: value


class _Parser:
    """Recursive descent over one expression's tokens, building closures over a scope."""

    _LEVELS = (("==", "!=", "===", "!=="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = self._tokenize(source)
        self.pos = 0
        self.depth = 0

    def _tokenize(self, source: str) -> list[tuple[str, str]]:
        tokens: list[tuple[str, str]] = []
        pos = 0
        while source[pos:].strip():
            match = _TOKEN.match(source, pos)
            if match is None:
                bad = source[pos:].lstrip()[0]
                what = "unterminated string" if bad in "'\"" else f"unexpected character {bad!r}"
                raise self.error(what)
            kind = match.lastgroup or ""
            tokens.append((kind, match.group(kind)))
            pos = match.end()
        tokens.append(("end", ""))
        return tokens

    def error(self, reason: str) -> InvalidExpression:
        return InvalidExpression(f"invalid expression '${{{self.source}}}': {reason}")

    def peek(self) -> str:
        kind, text = self.tokens[self.pos]
        return text if kind == "op" else ""

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, op: str) -> None:
        kind, text = self.take()
        if kind != "op" or text != op:
            raise self.error(f"expected '{op}' but found {_describe(text)}")

    def parse(self) -> Node:
        if self.tokens[0][0] == "end":
            raise self.error("empty expression")
        node = self.ternary()
        kind, text = self.tokens[self.pos]
        if kind != "end":
            raise self.error(f"unexpected {text!r} after a complete expression")
        return node

    def ternary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_NESTING_DEPTH:
            raise self.error(f"nested more than {MAX_NESTING_DEPTH} levels deep")
        try:
            return self._ternary()
        finally:
            self.depth -= 1

    def _ternary(self) -> Node:
        cond = self.logical("||")
        if self.peek() != "?":
            return cond
        self.take()
        yes = self.ternary()
        self.expect(":")
        no = self.ternary()
        return lambda s: yes(s) if _truthy(cond(s)) else no(s)

    def logical(self, op: str) -> Node:
        left = self._logical_operand(op)
        while self.peek() == op:
            self.take()
            left = self._logical_node(op, left, self._logical_operand(op))
        return left

    def _logical_operand(self, op: str) -> Node:
        return self.logical("&&") if op == "||" else self.binary(0)

    @staticmethod
    def _logical_node(op: str, left: Node, right: Node) -> Node:
        if op == "||":
            return lambda s: lhs if _truthy(lhs := left(s)) else right(s)
        return lambda s: right(s) if _truthy(lhs := left(s)) else lhs

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            left = self._binary_node(level, op, left, self.binary(level + 1))
        return left

    @staticmethod
    def _binary_node(level: int, op: str, left: Node, right: Node) -> Node:
        if level < 2:
            return lambda s: _compare(op, left(s), right(s))
        return lambda s: _arithmetic(op, left(s), right(s))

    def unary(self) -> Node:
        kind, op = self.tokens[self.pos]
        if kind in ("op", "name") and op in _PREFIXES:
            self.depth += 1
            if self.depth > MAX_NESTING_DEPTH:
                raise self.error(f"nested more than {MAX_NESTING_DEPTH} levels deep")
            try:
                return self._prefixed(op)
            finally:
                self.depth -= 1
        return self.postfix()

    def _prefixed(self, op: str) -> Node:
        self.take()
        operand = self.unary()
        if op == "!":
            return lambda s: not _truthy(operand(s))
        if op == "+":
            return lambda s: _to_number(operand(s))
        if op == "typeof":
            return _typeof(operand)
        if op == "void":
            return _void(operand)
        return lambda s: _negate(operand(s))

    def postfix(self) -> Node:
        node, path = self.primary()
        static: str | None = path if self.tokens[self.pos - 1][0] == "name" else None
        while self.peek() in (".", "[", "("):
            op = self.take()[1]
            if op == "(":
                node, path, static = self._call(static), f"{path}()", None
                continue
            if op == ".":
                kind, key = self.take()
                if kind != "name":
                    raise self.error(f"expected a name after '.' but found {_describe(key)}")
                dotted = None if static is None else f"{static}.{key}"
                if self.peek() == "(" and dotted not in FUNCTIONS:
                    if key not in METHOD_NAMES:
                        raise self.error(f"unknown method '{key}' in '{path}.{key}()'")
                    self.take()
                    node = self._method_node(node, key, self._arguments(), path)
                    path, static = f"{path}.{key}()", None
                    continue
                static = dotted
                node, path = self._member_node(node, _constant(key), path), f"{path}.{key}"
                continue
            index = self.ternary()
            self.expect("]")
            node, path, static = self._member_node(node, index, path), f"{path}[...]", None
        return node

    @staticmethod
    def _member_node(target: Node, key: Node, path: str) -> Node:
        return lambda s: _member(target(s), key(s), path)

    @staticmethod
    def _method_node(target: Node, name: str, args: list[Node], path: str) -> Node:
        return lambda s: call_method(target(s), name, [arg(s) for arg in args], path)

    def _arguments(self) -> list[Node]:
        """The arguments of a call, after its "(" and through its ")"."""
        args: list[Node] = []
        while self.peek() != ")":
            args.append(self.ternary())
            if self.peek() != ",":
                break
            self.take()
        self.expect(")")
        return args

    def _call(self, name: str | None) -> Node:
        if (name or "") not in FUNCTIONS:
            raise self.error(f"unknown function {name or 'expression'!r}")
        function = FUNCTIONS[name or ""]
        args = self._arguments()
        if function is None:  # moment(): reads text in the workflow's time zone
            if not args:  # refused where it is written: see docs/language/expressions.md
                raise self.error(NO_CLOCK)
            return lambda s: make_moment(tuple(arg(s) for arg in args), s.default_zone())
        return lambda s: function(*(arg(s) for arg in args))

    def primary(self) -> tuple[Node, str]:
        kind, text = self.take()
        if kind == "num":
            value = _normalize(float(text)) if any(c in text for c in ".eE") else int(text)
            return _constant(value), text
        if kind == "str":
            literal = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1])
            return _constant(literal), text
        if kind == "name":
            if text in _LITERALS:
                return _constant(_LITERALS[text]), text
            return (lambda s: s.lookup(text)), text
        if text == "(":
            node = self.ternary()
            self.expect(")")
            return node, "(...)"
        raise self.error(f"unexpected {text!r}" if text else "unexpected end of expression")


@lru_cache(maxsize=4096)
def _compile(source: str) -> Node:
    if len(source) > MAX_EXPRESSION_CHARS:
        head = source[:40].replace("\n", " ")
        raise InvalidExpression(
            f"expression '${{{head}...}}' is {len(source)} characters long,"
            f" over the limit of {MAX_EXPRESSION_CHARS}"
        )
    parser = _Parser(source)
    try:
        node = parser.parse()
    except RecursionError:
        raise InvalidExpression("expression is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        raise InvalidExpression(f"invalid number in expression: {exc}") from None
    return node


Part = str | Node


def _naming_errors(node: Node, source: str) -> Node:
    """``node``, whose evaluation errors name the expression they happened in."""

    def evaluate(scope: _Scope) -> Any:
        try:
            return node(scope)
        except InvalidExpression as exc:
            # Already named: a nested template's expression, or the missing variable.
            if "${" in str(exc) or str(exc).startswith("undefined variable"):
                raise
            raise InvalidExpression(f"{exc} in '${{{source}}}'") from None
        except (OverflowError, ValueError) as exc:  # a date or number out of range
            raise InvalidExpression(f"out of range: {exc} in '${{{source}}}'") from None

    return evaluate


def _find_close(text: str, start: int) -> int:
    """Index of the ``}`` closing an expression that starts at ``start``, or -1."""
    quote = ""
    i = start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "}":
            return i
        i += 1
    return -1


@lru_cache(maxsize=4096)
def _split(text: str) -> tuple[tuple[Part, ...], bool]:
    """Literal text and compiled expressions, and whether the text is one whole expression."""
    parts: list[Part] = []
    literal: list[str] = []
    i = 0
    while (dollar := text.find("$", i)) != -1:
        literal.append(text[i:dollar])
        following = text[dollar + 1 : dollar + 2]
        close = _find_close(text, dollar + 2) if following == "{" else -1
        if following == "$":
            literal.append("$")
            i = dollar + 2
        elif close == -1:
            literal.append("$")
            i = dollar + 1
        else:
            if "".join(literal):
                parts.append("".join(literal))
            literal = []
            source = text[dollar + 2 : close]
            node = _compile(source)
            parts.append(_naming_errors(node, source))
            i = close + 1
    literal.append(text[i:])
    if "".join(literal):
        parts.append("".join(literal))
    whole = len(parts) == 1 and not isinstance(parts[0], str)
    return tuple(parts), whole


def _has_template(value: Any) -> bool:
    if isinstance(value, str):
        return "$" in value
    if isinstance(value, Mapping):
        return any(_has_template(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_template(v) for v in value)
    return False


class _Scope:
    """One rendering pass: the context, names being resolved, and names already resolved."""

    def __init__(self, context: Mapping[str, Any]) -> None:
        self.context = context
        self.resolving: set[str] = set()
        self.resolved: dict[str, Any] = {}

    def lookup(self, name: str) -> Any:
        if name in self.resolved:
            return self.resolved[name]
        if name not in self.context:
            raise _Missing(f"undefined variable '{name}'")
        value = self.context[name]
        if _has_template(value):
            if name in self.resolving:
                raise InvalidExpression(f"cyclic reference to '{name}'")
            self.resolving.add(name)
            try:
                value = self.render(value)
            finally:
                self.resolving.discard(name)
        self.resolved[name] = value
        return value

    def default_zone(self) -> str | None:
        """The workflow's time zone (``timezone``), in which ``moment()`` reads bare times."""
        zone = self.context.get("timezone")
        return zone if isinstance(zone, str) and zone else None

    def render(self, value: Any) -> Any:
        if isinstance(value, str):
            return value if "$" not in value else self.render_text(value)
        if value is None or isinstance(value, bool | int | float):
            return value  # before the Mapping check: an ABC's isinstance is slow
        if isinstance(value, dict | Mapping):
            return {key: self.render(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.render(item) for item in value]
        return value

    def render_text(self, text: str) -> Any:
        parts, whole = _split(text)
        if whole:
            value = parts[0](self)  # type: ignore[operator]
            if value is UNDEFINED:
                return None
            return value.format() if isinstance(value, Moment) else value
        # Bounded as a whole too: params that each double the one before are not.
        return sized_text(
            "".join(part if isinstance(part, str) else to_text(part(self)) for part in parts)
        )


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Render every template string inside ``value`` (dicts and lists deeply) against ``context``.

    Raises :class:`InvalidExpression` for a syntax error, an undefined variable or key, a
    type error in an operator, or a cyclic reference between context values.
    """
    if isinstance(value, str) and "$" not in value:
        return value
    return _Scope(context).render(value)


def check_template(text: str) -> None:
    """Raise :class:`InvalidExpression` if any ``${...}`` in ``text`` does not parse."""
    if "$" in text:
        _split(text)


def escape(value: Any) -> Any:
    """``value`` with every ``$`` doubled, so that :func:`render` gives it back unchanged.

    Data that did not come from a workflow file (stored params, ``--param`` values) is
    escaped before it joins a rendering context: it is never evaluated as a template.
    """
    if isinstance(value, str):
        return value.replace("$", "$$") if "$" in value else value
    if isinstance(value, Mapping):
        return {key: escape(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [escape(item) for item in value]
    return value
