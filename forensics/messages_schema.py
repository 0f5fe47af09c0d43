"""Reading a message catalogue file: safe YAML, then its JSON Schema.

A catalogue file may come from a user (`forensics messages check FILE`), so it
is read like a rule file: PyYAML's safe loader, no anchors or aliases (a
billion-laughs file is refused before anything is expanded), a size limit,
and every problem named by file and line, taken from the marks of the YAML
node graph. The shape of an entry is `rules/messages.schema.json`, one
statement of it that the users' editors can read too; what a schema cannot
say (patterns, examples, unique ids) is `messages_check`'s.
"""

from __future__ import annotations

import functools
import json

from . import lazy, shipped

SCHEMA_FILE = "messages.schema.json"
MAX_FILE_BYTES = 4 << 20  # dozens of times the largest shipped file
MAX_NODES = 200_000

Problem = tuple[str, int, str]  # (file as displayed, line, message)


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(shipped.rules_folder().joinpath(SCHEMA_FILE).read_text("utf-8"))


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def read(path: str, display: str, validate: bool = True) -> tuple[list[tuple[dict, int]], list[Problem]]:
    """The entries of one catalogue file that fit the schema, each with the
    line it starts on, and every problem of the file. An entry with a
    problem is left out; the others are kept. Without `validate` (the
    shipped files, which the test suite validates, so that no run pays for
    jsonschema) only the file's own shape is checked."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return [], [(display, 0, f"cannot read: {exc.strerror or exc}")]
    if len(raw) > MAX_FILE_BYTES:
        return [], [(display, 0, f"larger than {MAX_FILE_BYTES} bytes: not a catalogue file")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [(display, raw[:exc.start].count(b"\n") + 1, "not UTF-8 text")]
    try:
        root, data = _compose(text)
    except _Refused as exc:
        return [], [(display, exc.line, exc.message)]
    if not isinstance(data, dict):
        return [], [(display, 1, "a catalogue file is a mapping with a 'messages' list")]
    if not validate:
        entries = data.get("messages")
        if not isinstance(entries, list):
            return [], [(display, 1, "a catalogue file is a mapping with a 'messages' list")]
        return list(zip(entries, (node.start_mark.line + 1 for node in _node_at(root, ["messages"]).value))), []
    problems: list[Problem] = []
    broken: set[int] = set()
    for error in _validator().iter_errors(data):
        error = _most_specific(error)
        where = list(error.absolute_path)
        index = where[1] if len(where) >= 2 and where[0] == "messages" and isinstance(where[1], int) else None
        if index is None:  # the file's own shape: nothing in it is usable
            problems.append((display, _line(root, where, error), _message(error)))
            broken.add(-1)
            continue
        broken.add(index)
        entry = data["messages"][index]
        name = entry.get("id") if isinstance(entry, dict) else None
        label = ".".join(str(step) for step in where[2:])
        text = _message(error)
        problems.append((display, _line(root, where, error),
                         f"{name if isinstance(name, str) else '?'}: {label + ': ' if label else ''}{text}"))
    problems.sort(key=lambda p: p[1])
    if -1 in broken:
        return [], problems
    items = _node_at(root, ["messages"]).value
    kept = [(raw_entry, items[i].start_mark.line + 1) for i, raw_entry in enumerate(data["messages"])
            if i not in broken]
    return kept, problems


class _Refused(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line, self.message = line, message


def _compose(text: str):
    """(node graph, data) of the text, parsed once: the data is built from
    the nodes whose marks name the lines."""
    loader = lazy.yaml_safe_loader()(text)
    try:
        try:
            root = loader.get_single_node()
        except lazy.yaml.MarkedYAMLError as exc:
            raise _Refused(_mark_line(exc), f"invalid YAML: {_yaml_problem(exc)}") from None
        except (lazy.yaml.YAMLError, RecursionError) as exc:
            raise _Refused(1, f"invalid YAML: {exc}") from None
        if root is None:
            raise _Refused(1, "empty file: a catalogue file is a mapping with a 'messages' list")
        shape = _graph_problem(root)
        if shape == "alias":
            line, _, what = lazy.yaml_anchor(text) or (root.start_mark.line + 1, 0, "")
            raise _Refused(line, f"YAML anchors and aliases are not allowed in catalogue files{what and f' ({what})'}")
        if shape:
            raise _Refused(1, shape)
        try:
            return root, loader.construct_document(root)
        except lazy.yaml.MarkedYAMLError as exc:  # a tag the safe loader will not build
            raise _Refused(_mark_line(exc), f"invalid YAML: {_yaml_problem(exc)}") from None
        except (lazy.yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
            raise _Refused(1, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _mark_line(exc) -> int:
    mark = exc.problem_mark or exc.context_mark
    return mark.line + 1 if mark else 1


def _yaml_problem(exc) -> str:
    return ", ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"


def _graph_problem(root) -> str:
    """"alias" when a node is reached twice (the graph is a DAG, which a
    schema validator walking it would expand), a reason when the graph is
    too big to be a catalogue, else ""."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return "alias"
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            return f"more than {MAX_NODES} YAML nodes: not a catalogue file"
        if isinstance(node, lazy.yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, lazy.yaml.SequenceNode):
            stack.extend(node.value)
    return ""


def _node_at(root, path: list):
    """The node a JSON path leads to (as far as it leads)."""
    node = root
    for step in path:
        if isinstance(node, lazy.yaml.MappingNode):
            node = next((value for key, value in node.value
                         if isinstance(key, lazy.yaml.ScalarNode) and key.value == str(step)), None)
            if node is None:
                return None
        elif isinstance(node, lazy.yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
        else:
            return None
    return node


def _line(root, path: list, error=None) -> int:
    """The line of the node an error is about: an unknown key's own line,
    else the deepest node the path reaches."""
    for depth in range(len(path), -1, -1):
        node = _node_at(root, path[:depth])
        if node is not None:
            break
    else:
        return 1
    extra = _unknown_keys(error) if error is not None else []
    if extra and isinstance(node, lazy.yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, lazy.yaml.ScalarNode) and key.value == extra[0]:
                return key.start_mark.line + 1
    return node.start_mark.line + 1


def _unknown_keys(error) -> list[str]:
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return []
    allowed = set(error.schema.get("properties", {}))
    return [str(key) for key in error.instance if key not in allowed]


def _message(error) -> str:
    """The error in words a catalogue author reads: which key is missing or
    unknown, the schema's own `x-message` where it gives one."""
    if error.validator == "required":  # one error per missing key
        return "missing " + error.message.replace(" is a required property", "")
    extra = _unknown_keys(error)
    if extra:
        allowed = sorted(error.schema.get("properties", {}))
        return f"unknown key(s): {', '.join(extra)} (allowed: {', '.join(allowed)})"
    custom = error.schema.get("x-message") if isinstance(error.schema, dict) else None
    if custom:
        return custom if isinstance(error.instance, (dict, list)) else f"{_shortened(repr(error.instance))} {custom}"
    return error.message


def _shortened(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[:most - 5] + "…" + text[-4:]


def _most_specific(error):
    """For `oneOf` failures, the error of the branch that got furthest: a
    list with an empty string is reported as that string, not as 'not a
    string'."""
    from jsonschema.exceptions import best_match

    while error.context:
        deepest = max(len(e.absolute_path) for e in error.context)
        if deepest <= len(error.absolute_path):
            break
        error = best_match([e for e in error.context if len(e.absolute_path) == deepest]) or error
    return error
