"""Rules as data: YAML files that match the normalized state and emit
findings and wait-for edges, without a line of Python.

A rule file is validated against `rules/schema.json` (shipped as
`forensics.rules_data`) and then checked for what a schema cannot say
(duplicate ids, regexes that do not compile or could backtrack without end,
unknown template placeholders). Every error names file:line:col, taken from
the marks of the YAML node graph (`yaml.compose` with the safe loader).

Safe by construction: no `eval`, no code, no YAML tags beyond the safe
loader's, no aliases (a billion-laughs file is refused before anything is
expanded), regexes at most 512 characters and free of nested unbounded
quantifiers (checked on the parsed pattern), and every subject a regex sees
cut to 4 KiB. Templates substitute `{name}` placeholders from a fixed table
and nothing else.

The module is itself a plugin: its module-level hooks serve the shipped
rules; `RuleSet` objects serve a team's `--rules DIR`.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field

from . import lazy, shipped
from . import model as m
from .hookspecs import hookimpl
from .ranges import compact
from .ruledocs import RuleDoc

MAX_PATTERN = 512           # characters in one regex
MAX_SUBJECT = 4096          # characters of a log line or frame a regex is run on
MAX_FILE_BYTES = 2 << 20    # a rule file larger than this is refused unread
MAX_NODES = 200_000         # YAML nodes in one file
MAX_EVIDENCE = 8            # evidence lines cited per finding
SHIPPED_DISPLAY = "forensics.rules_data"
RULE_SUFFIXES = (".yaml", ".yml")

PLACEHOLDERS = frozenset({
    "rank", "ranks", "count", "activity", "op", "group", "seq", "state", "why",
    "frame", "frame_function", "frame_file", "frame_line", "frame_at", "thread",
    "log", "log_at", "others", "others_count", "others_op", "others_group", "waiters",
})
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


class RuleError(Exception):
    """A rule file that cannot be used, with where: path:line:col."""

    def __init__(self, path: str, line: int, col: int, message: str):
        super().__init__(message)
        self.path, self.line, self.col, self.message = path, line, col, message

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.message}"


class RuleFileErrors(Exception):
    """Every problem found in one or more rule files (first one is `str()`)."""

    def __init__(self, errors: list[RuleError]):
        super().__init__(str(errors[0]))
        self.errors = errors


# ------------------------------------------------------------------ regexes

def _nested_unbounded(pattern) -> bool:
    """True when an unbounded repeat contains another unbounded repeat, the
    shape of catastrophic backtracking (`(a+)+`, `(\\w*)*x`)."""
    try:
        from re import _parser as sre_parse  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        import sre_parse  # type: ignore[no-redef]
    from re import _constants as sre  # noqa: F401  (present when _parser is)

    tree = sre_parse.parse(pattern)
    unbounded = sre_parse.MAXREPEAT

    def walk(items, inside: bool) -> bool:
        for op, arg in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                low, high, sub = arg
                open_ended = high == unbounded or high > 1000
                if open_ended and inside and name != "POSSESSIVE_REPEAT":
                    return True
                if walk(sub, inside or open_ended):
                    return True
            elif name == "SUBPATTERN":
                if walk(arg[-1], inside):
                    return True
            elif name == "BRANCH":
                if any(walk(branch, inside) for branch in arg[1]):
                    return True
            elif name in ("ASSERT", "ASSERT_NOT"):
                if walk(arg[1], inside):
                    return True
            elif name == "ATOMIC_GROUP":
                if walk(arg, inside):
                    return True
            elif name == "GROUPREF_EXISTS":
                if walk(arg[1], inside) or (arg[2] is not None and walk(arg[2], inside)):
                    return True
        return False

    return walk(tree, False)


def compile_pattern(text: str) -> re.Pattern:
    """Compile a rule's regex or raise ValueError saying why not."""
    if len(text) > MAX_PATTERN:
        raise ValueError(f"regex is {len(text)} characters, over the {MAX_PATTERN} limit")
    try:
        compiled = re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid regex: {exc.msg} at position {exc.pos}") from None
    except (RecursionError, OverflowError):
        raise ValueError("invalid regex: nested too deeply") from None
    if _nested_unbounded(text):
        raise ValueError("regex nests unbounded quantifiers (like (a+)+), which can backtrack "
                         "without end; rewrite it without the inner or outer repeat")
    return compiled


def _search(pattern: re.Pattern, text: str) -> re.Match | None:
    return pattern.search(text[:MAX_SUBJECT])


# ------------------------------------------------------------------ templates

def template_names(template: str) -> list[str]:
    return [m_.group(1) for m_ in _PLACEHOLDER.finditer(template) if m_.group(1) is not None]


def render(template: str, values: dict[str, str]) -> str:
    """`{name}` → values[name]; `{{` and `}}` are literal braces. Nothing else
    is interpreted: no attribute access, no format specs, no expressions."""
    def sub(match: re.Match) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return values.get(match.group(1), "")
    return _PLACEHOLDER.sub(sub, template)


# ------------------------------------------------------------------ loading

def _marks(node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _check_nodes(root, path: str) -> None:
    """Refuse aliases (the node graph would be a DAG, expanded exponentially)
    and absurd sizes before any data is built."""
    seen: set[int] = set()
    stack = [root]
    count = 0
    while stack:
        node = stack.pop()
        if id(node) in seen:
            line, col = _marks(node)
            raise RuleError(path, line, col, "YAML anchors and aliases are not allowed in rule files")
        seen.add(id(node))
        count += 1
        if count > MAX_NODES:
            raise RuleError(path, 1, 1, f"rule file has more than {MAX_NODES} YAML nodes")
        if isinstance(node, lazy.yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, lazy.yaml.SequenceNode):
            stack.extend(node.value)


def _node_at(root, path) -> tuple[object, object]:
    """Follow a JSON-schema error path through the node graph: (node, key node
    of the last mapping step or None)."""
    node, key_node = root, None
    for step in path:
        if isinstance(node, lazy.yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, lazy.yaml.ScalarNode) and key.value == str(step):
                    node, key_node = value, key
                    break
            else:
                return node, key_node
        elif isinstance(node, lazy.yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            node, key_node = node.value[step], None
        else:
            return node, key_node
    return node, key_node


def _key_node(mapping, name: str):
    if isinstance(mapping, lazy.yaml.MappingNode):
        for key, _ in mapping.value:
            if isinstance(key, lazy.yaml.ScalarNode) and key.value == name:
                return key
    return None


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(shipped.rules_folder().joinpath("schema.json").read_text("utf-8"))


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema
    return jsonschema.Draft202012Validator(schema())


def _schema_errors(data, root, path: str) -> list[RuleError]:
    from jsonschema.exceptions import best_match

    validator = _validator()
    found = []
    for error in validator.iter_errors(data):
        either = _one_of_keys(error)
        if not either:
            error = _most_specific(error, best_match)
        node, key_node = _node_at(root, error.absolute_path)
        where = node
        message = error.message
        if either:
            message = f"needs {' or '.join(repr(k) for k in either)}"
            if {k.endswith("_zh") for k in either} == {True, False}:
                message += " (one language is enough)"
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            extra = [k for k in error.instance if k not in allowed]
            if extra:
                where = _key_node(node, str(extra[0])) or node
                message = f"unknown key {extra[0]!r}"
                if allowed:
                    message += f" (allowed: {', '.join(sorted(allowed))})"
        elif error.validator == "required" and isinstance(error.instance, dict):
            message = error.message.replace(" is a required property", " is required")
        elif key_node is not None and error.validator in ("type", "enum", "const", "pattern",
                                                          "minimum", "maxLength", "minLength"):
            where = node
        label = "/".join(str(p) for p in error.absolute_path)
        line, col = _marks(where)
        found.append(RuleError(path, line, col, f"{label + ': ' if label else ''}{message}"))
    found.sort(key=lambda e: (e.line, e.col))
    return found


def _one_of_keys(error) -> list[str]:
    """The keys of an `anyOf` whose every branch only requires a key (`title`
    or `title_zh`), so the error can say "needs 'title' or 'title_zh'" rather
    than one branch's complaint."""
    if error.validator != "anyOf" or not error.context:
        return []
    keys = []
    for branch in error.validator_value:
        if set(branch) != {"required"} or len(branch["required"]) != 1:
            return []
        keys.append(branch["required"][0])
    return keys


def _most_specific(error, best_match):
    """For oneOf/anyOf failures, the error of the branch that got furthest:
    `thread: 3` is reported as a bad thread, not as 'not an array'."""
    while error.context:
        deepest = max(len(e.absolute_path) for e in error.context)
        error = best_match([e for e in error.context if len(e.absolute_path) == deepest]) or error
        if not error.context:
            break
    return error


def read_rule_file(path: str, display: str | None = None, validate: bool = True) -> tuple[dict, object]:
    """(data, node graph) of a rule file, or RuleFileErrors naming file:line:col."""
    display = display or path
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise RuleFileErrors([RuleError(display, 1, 1, f"rule file is {size} bytes, over the "
                                                           f"{MAX_FILE_BYTES} byte limit")])
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise RuleFileErrors([RuleError(display, 0, 0, f"cannot read: {exc.strerror or exc}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise RuleFileErrors([RuleError(display, line, 1, "not UTF-8 text")]) from None
    return parse_rule_text(text, display, validate)


def _yaml_problem(exc: lazy.yaml.MarkedYAMLError) -> str:
    parts = [p for p in (exc.context, exc.problem) if p]
    return ", ".join(parts) or "invalid YAML"


def _refuse_anchors(text: str, display: str) -> None:
    """Scan the event stream (nothing is built) for anchors and aliases: a
    rule file never needs them, and they are how YAML bombs expand."""
    found = lazy.yaml_anchor(text)
    if found is not None:
        line, col, what = found
        raise RuleError(display, line, col, f"YAML anchors and aliases are not allowed in rule files ({what})")


def parse_rule_text(text: str, display: str, validate: bool = True) -> tuple[dict, object]:
    try:
        _refuse_anchors(text, display)
        root = lazy.yaml.compose(text, Loader=lazy.yaml_safe_loader())
    except RuleError as exc:
        raise RuleFileErrors([exc]) from None
    except lazy.yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RuleFileErrors([RuleError(display, line, col, f"invalid YAML: {_yaml_problem(exc)}")]) from None
    except lazy.yaml.YAMLError as exc:
        raise RuleFileErrors([RuleError(display, 1, 1, f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise RuleFileErrors([RuleError(display, 1, 1, "invalid YAML: nested too deeply")]) from None
    if root is None:
        raise RuleFileErrors([RuleError(display, 1, 1, "empty rule file: expected a mapping with 'rules'")])
    try:
        _check_nodes(root, display)
    except RuleError as exc:
        raise RuleFileErrors([exc]) from None
    try:
        data = lazy.yaml.load(text, Loader=lazy.yaml_safe_loader())  # aliases refused above: nothing to expand
    except lazy.yaml.MarkedYAMLError as exc:  # a tag the safe loader will not build
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RuleFileErrors([RuleError(display, line, col, f"invalid YAML: {_yaml_problem(exc)}")]) from None
    except (lazy.yaml.YAMLError, RecursionError, ValueError) as exc:
        raise RuleFileErrors([RuleError(display, 1, 1, f"invalid YAML: {exc}")]) from None
    errors = _schema_errors(data, root, display) if validate else []
    if errors:
        raise RuleFileErrors(errors)
    return data, root


# ------------------------------------------------------------------ compiled rules

@dataclass(frozen=True)
class FrameTest:
    function: re.Pattern | None
    file: re.Pattern | None
    thread: str  # main | any | background


@dataclass(frozen=True)
class RankTest:
    activities: frozenset = frozenset()
    blocked: bool | None = None
    alive: bool | None = None
    ops: frozenset = frozenset()
    group: re.Pattern | None = None
    states: frozenset = frozenset()
    ranks: frozenset = frozenset()
    why: re.Pattern | None = None
    frames: tuple[FrameTest, ...] = ()
    log: re.Pattern | None = None
    negated: "RankTest | None" = None
    any_of: tuple["RankTest", ...] = ()


@dataclass(frozen=True)
class OthersTest:
    test: RankTest
    minimum: int = 1
    every: bool = False
    live_only: bool = True
    same_group: bool | None = None
    same_op: bool | None = None
    awaits_rank: bool | None = None  # the rank is a member of the group the other waits in


@dataclass(frozen=True)
class RuleTest:
    name: str
    line: int
    hung: bool = False
    snapshot: dict | None = None
    files: dict | None = None
    corpus: str | None = None
    triggers_on: tuple[int, ...] | None = None
    edges: tuple[tuple[int, int], ...] | None = None
    message_contains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    doc: RuleDoc
    kind: str
    test: RankTest
    path: str
    line: int
    others: OthersTest | None = None
    matching: tuple[int | None, int | None] = (None, None)
    waited_on: int | None = None
    requires_stuck: bool = False
    message: str = ""
    message_zh: str = ""
    edge_direction: str = ""
    edge_semantics: str = m.AND
    edge_reason: str = ""
    tests: tuple[RuleTest, ...] = ()
    text: str = ""  # the rule's own YAML, for `rules show`
    hint: str = ""     # as written: a finding's hint in a language the rule lacks is left empty,
    hint_zh: str = ""  # and the reports fall back to the other one

    @property
    def id(self) -> str:
        return self.doc.id


class _Compiler:
    """Data + node graph → Rules, collecting semantic errors with their marks."""

    def __init__(self, path: str, display: str, root, source_lines: list[str]):
        self.path, self.display, self.root = path, display, root
        self.lines = source_lines
        self.errors: list[RuleError] = []

    def error(self, node, message: str) -> None:
        line, col = _marks(node) if node is not None else (1, 1)
        self.errors.append(RuleError(self.display, line, col, message))

    def regex(self, text: str, node) -> re.Pattern | None:
        try:
            return compile_pattern(text)
        except ValueError as exc:
            self.error(node, str(exc))
            return None

    def rank_test(self, spec: dict, node) -> RankTest:
        def child(name):
            return _node_at(node, [name])[0] if _key_node(node, name) is not None else node

        def as_set(value):
            return frozenset([value] if isinstance(value, str) else value)

        frames = []
        if "frame" in spec:
            raw = spec["frame"] if isinstance(spec["frame"], list) else [spec["frame"]]
            frame_node = child("frame")
            for index, frame in enumerate(raw):
                fnode = frame_node.value[index] if isinstance(frame_node, lazy.yaml.SequenceNode) else frame_node
                frames.append(FrameTest(
                    self.regex(frame["function"], _node_at(fnode, ["function"])[0]) if "function" in frame else None,
                    self.regex(frame["file"], _node_at(fnode, ["file"])[0]) if "file" in frame else None,
                    frame.get("thread", "main")))
        any_of = ()
        if "any_of" in spec:
            branches = child("any_of")
            nodes = branches.value if isinstance(branches, lazy.yaml.SequenceNode) else []
            # A duplicated key: the data holds the last value, the node lookup the first.
            any_of = tuple(self.rank_test(branch, nodes[i] if i < len(nodes) else branches)
                           for i, branch in enumerate(spec["any_of"]))
        return RankTest(
            activities=as_set(spec.get("activity", ())),
            blocked=spec.get("blocked"), alive=spec.get("alive"),
            ops=frozenset(m.normalize_op(op) for op in as_set(spec.get("op", ()))),
            group=self.regex(spec["group"], child("group")) if "group" in spec else None,
            states=as_set(spec.get("state", ())),
            ranks=frozenset(spec.get("ranks", ())),
            why=self.regex(spec["why"], child("why")) if "why" in spec else None,
            frames=tuple(frames),
            log=self.regex(spec["log"], child("log")) if "log" in spec else None,
            negated=self.rank_test(spec["not"], child("not")) if "not" in spec else None,
            any_of=any_of)

    def template(self, text: str, node) -> str:
        for name in template_names(text):
            if name not in PLACEHOLDERS:
                self.error(node, f"unknown placeholder {{{name}}} (known: {', '.join(sorted(PLACEHOLDERS))})")
        return text

    def rule(self, spec: dict, node) -> Rule:
        def at(*path):
            return _node_at(node, list(path))[0]

        line, _ = _marks(node)
        rid = spec["id"]
        test = self.rank_test(spec["match"], at("match"))
        others = None
        if "others" in spec:
            o = spec["others"]
            others = OthersTest(self.rank_test(o["match"], at("others", "match")),
                                minimum=o.get("min", 1), every=bool(o.get("all")),
                                live_only=o.get("scope", "live") == "live",
                                same_group=o.get("same_group"), same_op=o.get("same_op"),
                                awaits_rank=o.get("awaits_rank"))
        bounds = spec.get("matching") or {}
        if bounds.get("min") is not None and bounds.get("max") is not None and bounds["min"] > bounds["max"]:
            self.error(at("matching"), "matching: min is larger than max")
        finding = spec.get("finding") or {}
        message = self.template(finding["message"], at("finding", "message")) if "message" in finding else ""
        message_zh = (self.template(finding["message_zh"], at("finding", "message_zh"))
                      if "message_zh" in finding else "")
        edges = spec.get("edges") or {}
        reason = self.template(edges["reason"], at("edges", "reason")) if edges else ""
        if edges and "waited_on" in spec:
            self.error(at("waited_on"), "a rule that emits edges cannot depend on waited_on "
                                        "(the graph is built from the edges)")
        if edges and others is None:
            self.error(at("edges"), "edges need an 'others' block: it says which ranks wait (or are waited for)")
        if finding and spec["severity"] in ("error", "warning") and not (spec.get("hint") or spec.get("hint_zh")):
            self.error(node, f"rule {rid!r}: a {spec['severity']} finding needs a fix hint "
                             f"('hint' or 'hint_zh')")
        kind = spec.get("kind") or rid.replace("-", "_")
        emits = tuple(x for x, on in (("findings", bool(finding)), ("edges", bool(edges))) if on)
        title, title_zh = _both(spec.get("title", ""), spec.get("title_zh", ""))
        explanation, explanation_zh = _both(spec.get("explanation", ""), spec.get("explanation_zh", ""))
        hint, hint_zh = _both(spec.get("hint", ""), spec.get("hint_zh", ""))
        doc = RuleDoc(rid, title, title_zh, spec["severity"], explanation, explanation_zh, hint, hint_zh,
                      kinds=(kind,) if finding else (), emits=emits, source=f"{self.display}:{line}")
        tests = []
        for index, t in enumerate(spec.get("tests") or []):
            tnode = at("tests", index)
            tests.append(RuleTest(
                t["name"], _marks(tnode)[0], bool(t.get("hung")), t.get("snapshot"), t.get("files"),
                t.get("corpus"),
                tuple(t["triggers_on"]) if "triggers_on" in t else None,
                tuple(tuple(e) for e in t["edges"]) if "edges" in t else None,
                tuple(t.get("message_contains") or ())))
        end = node.end_mark.line
        text = "\n".join(self.lines[line - 1:end]).rstrip()
        return Rule(doc, kind, test, self.path, line, others,
                    (bounds.get("min"), bounds.get("max")), (spec.get("waited_on") or {}).get("min"),
                    bool(spec.get("requires_stuck")), message, message_zh,
                    edges.get("direction", ""), edges.get("semantics", m.AND), reason, tuple(tests), text,
                    spec.get("hint", ""), spec.get("hint_zh", ""))


MISSING_TEXT = {"en": "(no English text) ", "zh": "（缺少中文）"}


def _both(en: str, zh: str) -> tuple[str, str]:
    """A rule's text in both languages: a rule may be written in one only,
    and where the other would be printed (`rules list`, `rules show --lang`,
    a report's rule title) the text it has is shown, marked as missing in
    the language asked for."""
    if en and not zh:
        return en, MISSING_TEXT["zh"] + en
    if zh and not en:
        return MISSING_TEXT["en"] + zh, zh
    return en, zh


def load_file(path: str, display: str | None = None, validate: bool = True) -> list[Rule]:
    """Validate and compile one rule file; RuleFileErrors on any problem.
    `validate=False` skips the JSON Schema pass (the shipped files, which the
    test suite validates), not the safety checks or the compile."""
    display = display or path
    data, root = read_rule_file(path, display, validate)
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    compiler = _Compiler(path, display, root, lines)
    rules, seen = [], {}
    for index, spec in enumerate(data["rules"]):
        node = _node_at(root, ["rules", index])[0]
        rule = compiler.rule(spec, node)
        if rule.id in seen:
            compiler.error(_node_at(node, ["id"])[0], f"duplicate rule id {rule.id!r} "
                                                      f"(first defined at line {seen[rule.id]})")
            continue
        seen[rule.id] = rule.line
        rules.append(rule)
    if compiler.errors:
        raise RuleFileErrors(sorted(compiler.errors, key=lambda e: (e.line, e.col)))
    return rules


def rule_files(path: str) -> list[str]:
    """A rule file, or the rule files directly inside a folder (sorted)."""
    if os.path.isdir(path):
        return [os.path.join(path, name) for name in sorted(os.listdir(path))
                if name.endswith(RULE_SUFFIXES) and os.path.isfile(os.path.join(path, name))]
    return [path]


def load_paths(paths, reserved: dict[str, str] | None = None) -> list[Rule]:
    """Every rule of files and folders; ids must be unique across them and
    must not take a built-in rule's id (`reserved`: id → where defined)."""
    rules: list[Rule] = []
    errors: list[RuleError] = []
    taken = dict(reserved or {})
    for path in paths:
        if not os.path.exists(path):
            errors.append(RuleError(path, 0, 0, "no such file or folder"))
            continue
        files = rule_files(path)
        if os.path.isdir(path) and not files:
            errors.append(RuleError(path, 0, 0, "folder holds no .yaml/.yml rule files"))
        for file in files:
            try:
                loaded = load_file(file)
            except RuleFileErrors as exc:
                errors.extend(exc.errors)
                continue
            for rule in loaded:
                if rule.id in taken:
                    errors.append(RuleError(file, rule.line, 1, f"rule id {rule.id!r} is already "
                                                                 f"defined by {taken[rule.id]}"))
                    continue
                taken[rule.id] = rule.doc.source
                rules.append(rule)
    if errors:
        raise RuleFileErrors(errors)
    return rules


def shipped_dir() -> str:
    return str(shipped.rules_folder())


@functools.lru_cache(maxsize=1)
def shipped_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for file in rule_files(shipped_dir()):
        # Validated against the schema by the test suite (`forensics rules check`), not on every run.
        rules.extend(load_file(file, f"{SHIPPED_DISPLAY}/{os.path.basename(file)}", validate=False))
    return tuple(rules)


# ------------------------------------------------------------------ matching

@dataclass
class Capture:
    """What a rank's match rests on: the evidence to cite and the values the
    templates may name."""

    evidence: list = field(default_factory=list)
    values: dict = field(default_factory=dict)

    def add(self, evidence, **values) -> None:
        if evidence is not None and evidence not in self.evidence:
            self.evidence.append(evidence)
        for key, value in values.items():
            self.values.setdefault(key, value)


def _main_thread(state: m.RankState) -> m.ThreadStack | None:
    if not state.threads:
        return None
    from .ingest.stacks import main_thread
    return main_thread(m.ProcessDump("", "", pid=state.pid, threads=state.threads))


_STACK_LABEL = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _stack_frames(state: m.RankState):
    """Frames of a snapshot's `stack` labels (innermost first), cited at the rank's line."""
    for label in reversed(state.stack):
        match = _STACK_LABEL.match(label)
        if match:
            yield m.Frame(match["function"], match["file"], int(match["line"] or 0)), None
        else:
            yield m.Frame(label), None


def _frame_candidates(state: m.RankState, where: str):
    main = _main_thread(state)
    if where in ("main", "any"):
        if main is not None:
            yield from ((frame, main) for frame in main.frames)
        if state.stack:
            yield from _stack_frames(state)
    if where in ("background", "any"):
        for thread in state.threads:
            if thread is not main:
                yield from ((frame, thread) for frame in thread.frames)


def _frame_label(frame: m.Frame) -> str:
    return f"{frame.function} ({frame.file}:{frame.line})" if frame.file else frame.function


def _match_frame(test: FrameTest, state: m.RankState, capture: Capture) -> bool:
    for frame, thread in _frame_candidates(state, test.thread):
        if test.function is not None and not _search(test.function, frame.function):
            continue
        if test.file is not None and not _search(test.file, frame.file):
            continue
        cited = thread.cite(frame) if thread is not None else None
        cited = cited or state.evidence
        capture.add(cited, frame=_frame_label(frame), frame_function=frame.function,
                    frame_file=frame.file, frame_line=str(frame.line),
                    frame_at=cited.cite() if cited else "", thread=(thread.name or thread.tid) if thread else "")
        return True
    return False


def _op_evidence(state: m.RankState):
    if state.current_op is not None and state.current_op.evidence is not None:
        return state.current_op.evidence
    return state.evidence


def match_rank(test: RankTest, state: m.RankState, capture: Capture | None) -> bool:
    """Whether `state` passes `test`; what the match rests on goes into
    `capture` (None: only the answer is wanted)."""
    op = state.current_op
    if test.ranks and state.rank not in test.ranks:
        return False
    if test.alive is not None and test.alive == state.is_dead:
        return False
    if test.blocked is not None and test.blocked != state.is_blocked:
        return False
    if test.activities and state.activity not in test.activities:
        return False
    if test.ops and (op is None or not (op.op in test.ops or ("collective" in test.ops and op.is_collective)
                                        or ("p2p" in test.ops and op.is_p2p))):
        return False
    if test.states and (op is None or op.state not in test.states):
        return False
    if test.group is not None and (op is None or not _search(test.group, m.group_id(op.group))):
        return False
    if test.why is not None and not _search(test.why, state.why):
        return False
    if capture is None:
        if not (test.frames or test.log is not None or test.negated is not None or test.any_of):
            return True
        capture = Capture()
    local = Capture()
    for frame_test in test.frames:
        if not _match_frame(frame_test, state, local):
            return False
    if test.log is not None:
        line = next((e for e in _log_lines(state) if _search(test.log, e.text)), None)
        if line is None:
            return False
        local.add(line, log=line.text.strip(), log_at=line.cite())
    if test.negated is not None and match_rank(test.negated, state, None):
        return False
    if test.any_of:
        for branch in test.any_of:
            if match_rank(branch, state, local):
                break
        else:
            return False
    if test.activities or test.ops or test.states or test.blocked or test.group is not None \
            or test.why is not None:
        local.add(_op_evidence(state))
    for evidence in local.evidence:
        capture.add(evidence)
    for key, value in local.values.items():
        capture.values.setdefault(key, value)
    return True


def _log_lines(state: m.RankState):
    """The rank's log lines a `log` test reads: those a reader recognized,
    then its console's last lines and last progress line (the lines no
    reader recognized, forensics.ingest.console)."""
    yield from state.log_events
    yield from state.last_words
    if state.last_progress is not None and state.last_progress not in state.last_words:
        yield state.last_progress


def _state_values(state: m.RankState) -> dict[str, str]:
    """Placeholders every matched rank has; frame values default to where the
    rank is (its `why`, cited at its evidence) when no frame test chose one."""
    op = state.current_op
    why = state.why or " ← ".join(reversed(state.stack[-2:])) or state.activity
    cited = _op_evidence(state)
    return {"rank": str(state.rank), "activity": state.activity, "why": why,
            "op": op.op if op else "", "group": m.group_id(op.group) if op else "",
            "seq": "" if op is None or op.seq is None else str(op.seq),
            "state": op.state if op else "", "frame": why, "frame_at": cited.cite() if cited else ""}


@dataclass
class Hit:
    rank: int
    capture: Capture
    others: list[int]


def evaluate(rule: Rule, incident: m.Incident, analysis=None) -> list[Hit]:
    """The ranks a rule matches, each with what it matched and which others
    satisfied the `others` block. O(ranks): others are counted once."""
    if rule.requires_stuck and not incident.stuck:
        return []
    if rule.waited_on is not None and analysis is None:
        return []
    index = _index(incident)
    # The rule's own test first: most rules match no rank or a handful, and
    # then the others need not be looked at at all. A test on `blocked`,
    # `activity`, `op` or `rank` only looks at the ranks that have it (a hung
    # job has 99,999 blocked ranks and one not; none of them in a barrier).
    # One scratch capture while ranks fail (100,000 of them, typically), a
    # fresh one once a rank matches or a partial match left something in it.
    candidates = []
    capture = Capture()
    for state in index.candidates(rule.test):
        if not match_rank(rule.test, state, capture):
            if capture.evidence or capture.values:
                capture = Capture()
            continue
        if rule.waited_on is not None and analysis.waiters_of.get(state.rank, 0) < rule.waited_on:
            capture = Capture()
            continue
        candidates.append((state, capture))
        capture = Capture()
    if not candidates:
        return []
    other_hits: set[int] = set()  # only who matched counts: their evidence is read again when cited
    if rule.others is not None:
        other_hits = index.hits(rule.others.test, rule.others.live_only)
    in_scope = index.scope(rule.others is not None and rule.others.live_only)
    hits = []
    for state, capture in candidates:
        others: list[int] = []
        if rule.others is not None:
            test = rule.others
            relate = test.same_group is not None or test.same_op is not None or test.awaits_rank is not None
            scope = len(in_scope) - (state.rank in in_scope)
            if relate:
                scope = sum(1 for r in in_scope if r != state.rank
                            and _related(test, state, incident.ranks[r], incident))
            count = len(other_hits) - (state.rank in other_hits)
            if relate or count:
                others = [r for r in other_hits if r != state.rank
                          and (not relate or _related(test, state, incident.ranks[r], incident))]
                count = len(others)
            if test.every and (scope == 0 or count != scope):
                continue
            if not test.every and count < test.minimum:
                continue
        capture.values.update({k: v for k, v in _state_values(state).items() if k not in capture.values})
        hits.append(Hit(state.rank, capture, others))
    low, high = rule.matching
    if (low is not None and len(hits) < low) or (high is not None and len(hits) > high):
        return []
    return hits


_PARTITIONS: dict = {}  # id(incident) → its _Index


class _Index:
    """One incident's ranks in rank order, split by blocked state, and (built
    on first use) by activity, by the name of the current call and by
    whether they have log lines or frames: a rule that tests `activity:
    data_loading`, `op: barrier` or a log line looks at the ranks that have
    one, not at 100,000 that do not."""

    def __init__(self, incident: m.Incident):
        self.incident = incident
        self.states = [incident.ranks[r] for r in sorted(incident.ranks)]
        self.by_blocked: dict[bool, list] = {True: [], False: []}
        for state in self.states:
            self.by_blocked[state.is_blocked].append(state)
        self._hits: dict = {}

    def _by(self, key: str, value_of) -> dict:
        """The ranks split by `value_of(state)`, built on first use."""
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = {}
            for state in self.states:
                found.setdefault(value_of(state), []).append(state)
        return found

    def candidates(self, test: "RankTest") -> list:
        """A superset of the ranks `test` can match, in rank order (each is
        still tested in full)."""
        options = [self.states if test.blocked is None else self.by_blocked[test.blocked]]
        if test.ranks:
            options.append([self.incident.ranks[r] for r in sorted(test.ranks) if r in self.incident.ranks])
        if test.activities:
            options.append(self._union(self._by("activity", lambda s: s.activity), test.activities))
        if test.ops and not test.ops & {"collective", "p2p"}:
            options.append(self._union(self._by("op", _op_name), test.ops))
        if test.log is not None:  # a log test needs log lines
            options.append(self._having("logged", lambda s: s.log_events or s.last_words or s.last_progress))
        if test.frames:  # a frame test needs frames
            options.append(self._having("framed", lambda s: s.threads or s.stack))
        return min(options, key=len)

    def _having(self, key: str, has) -> list:
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = [state for state in self.states if has(state)]
        return found

    def scope(self, live_only: bool) -> set[int]:
        """Every rank, or every live one."""
        key = ("scope", live_only)
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = {s.rank for s in self.states if not live_only or not s.is_dead}
        return found

    def hits(self, test: "RankTest", live_only: bool) -> set[int]:
        """The ranks `test` matches (the live ones, when `live_only`): the
        shipped rules share one `others` test, so it is run once."""
        key = (test, live_only)
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = {state.rank for state in self.candidates(test)
                                       if (not live_only or not state.is_dead) and match_rank(test, state, None)}
        return found

    @staticmethod
    def _union(index: dict, keys) -> list:
        found = [index.get(key, ()) for key in keys]
        if sum(1 for f in found if f) <= 1:
            return next((list(f) for f in found if f), [])
        return sorted((s for f in found for s in f), key=lambda s: s.rank)


def _op_name(state: m.RankState) -> str | None:
    return state.current_op.op if state.current_op is not None else None


def _index(incident: m.Incident) -> _Index:
    cached = _PARTITIONS.get(id(incident))
    if cached is None or cached.incident is not incident:
        _PARTITIONS.clear()  # one incident at a time; the entry keeps it alive until the next
        cached = _PARTITIONS[id(incident)] = _Index(incident)
    return cached


def _related(test: OthersTest, state: m.RankState, other: m.RankState, incident: m.Incident) -> bool:
    if test.awaits_rank is not None:
        member = other.current_op is not None and state.rank in incident.members(other.current_op.group)
        if member != test.awaits_rank:
            return False
    if test.same_group is not None:
        mine = m.group_id(state.current_op.group) if state.current_op else None
        theirs = m.group_id(other.current_op.group) if other.current_op else None
        if (mine is not None and mine == theirs) != test.same_group:
            return False
    if test.same_op is not None:
        mine = state.current_op.op if state.current_op else None
        theirs = other.current_op.op if other.current_op else None
        if (mine is not None and mine == theirs) != test.same_op:
            return False
    return True


_FINDING_WIDE = frozenset({"rank", "ranks", "count", "others", "others_count", "others_op", "others_group"})
SHOWN_VALUES = 3  # distinct values of one placeholder spelled out in a finding over several ranks
_SEVERAL = {"en": ("rank", "ranks", ": ", "; ", "; and {n} more"),
            "zh": ("Rank", "Rank", "：", "；", "；另有 {n} 项")}


def _values(template: str, hits: list[Hit], incident: m.Incident, analysis, lang: str = "en") -> dict[str, str]:
    """The values `template` names. `{rank}` and `{ranks}` name every rank
    the rule matched; a per-rank value (`{frame}`, `{op}`, `{log_at}`, …) is
    the one value when the ranks agree, and otherwise each distinct value
    with the ranks that have it, in rank order, the first few spelled out."""
    ranks = compact(h.rank for h in hits)
    per_rank = set(template_names(template)) - _FINDING_WIDE
    values = {key: _joined([(h.rank, h.capture.values.get(key, "")) for h in hits], lang)
              for key in per_rank if key != "waiters"}
    if "waiters" in per_rank:
        values["waiters"] = "" if analysis is None else _joined(
            [(h.rank, str(analysis.waiters_of.get(h.rank, 0))) for h in hits], lang)
    others = sorted({r for h in hits for r in h.others} - {h.rank for h in hits})
    other_ops = sorted({incident.ranks[r].current_op.op for r in others if incident.ranks[r].current_op})
    other_groups = sorted({m.group_id(incident.ranks[r].current_op.group) for r in others
                           if incident.ranks[r].current_op})
    values.update(rank=ranks, ranks=ranks, count=str(len(hits)),
                  others=compact(others), others_count=str(len(others)),
                  others_op="/".join(other_ops) or "-", others_group="/".join(other_groups) or "-")
    return values


def _joined(pairs: list[tuple[int, str]], lang: str) -> str:
    """One placeholder's value over several ranks: (rank, value) pairs."""
    holders: dict[str, list[int]] = {}
    for rank, value in pairs:
        if value:
            holders.setdefault(value, []).append(rank)
    if len(holders) <= 1:
        return next(iter(holders), "")
    one, many, colon, separator, more = _SEVERAL[lang]
    parts = [f"{one if len(ranks) == 1 else many} {compact(ranks)}{colon}{value}"
             for value, ranks in list(holders.items())[:SHOWN_VALUES]]
    text = separator.join(parts)
    if len(holders) > SHOWN_VALUES:
        text += more.format(n=len(holders) - SHOWN_VALUES)
    return text


def finding_of(rule: Rule, hits: list[Hit], incident: m.Incident, analysis=None) -> m.Finding:
    evidence: list = []
    for hit in hits:
        evidence.extend(e for e in hit.capture.evidence if e not in evidence)
    for rank in sorted({r for h in hits for r in h.others})[:3]:
        cited = _op_evidence(incident.ranks[rank])
        if cited is not None and cited not in evidence:
            evidence.append(cited)
    # A rule written in one language: the English fields carry the text it
    # has, the Chinese ones stay empty when it has none (reports fall back).
    template = rule.message or rule.message_zh
    message = render(template, _values(template, hits, incident, analysis, "en" if rule.message else "zh"))
    message_zh = (render(rule.message_zh, _values(rule.message_zh, hits, incident, analysis, "zh"))
                  if rule.message_zh else "")
    return m.Finding(rule.id, rule.kind, rule.doc.severity, tuple(h.rank for h in hits),
                     message, tuple(evidence[:MAX_EVIDENCE]), rule.hint or rule.hint_zh, message_zh, rule.hint_zh)


def edges_of(rule: Rule, hits: list[Hit], incident: m.Incident) -> list[m.WaitEdge]:
    edges = []
    for hit in hits:
        reason = render(rule.edge_reason, _values(rule.edge_reason, [hit], incident, None))
        for other in hit.others:
            cited = tuple(hit.capture.evidence[:2])
            other_evidence = _op_evidence(incident.ranks[other])
            if other_evidence is not None:
                cited += (other_evidence,)
            waiter, awaited = ((other, hit.rank) if rule.edge_direction == "others_wait_for_rank"
                               else (hit.rank, other))
            edges.append(m.WaitEdge(waiter, awaited, rule.edge_semantics, reason, rule.id, cited))
    return edges


class RuleSet:
    """A plugin serving a list of YAML rules through the hooks."""

    def __init__(self, rules, name: str = "yaml-rules"):
        self.rules = tuple(rules)
        self.name = name

    @hookimpl
    def forensics_rules(self):
        return [rule.doc for rule in self.rules]

    @hookimpl
    def forensics_wait_edges(self, incident):
        edges = []
        for rule in self.rules:
            if rule.edge_direction:
                edges.extend(edges_of(rule, evaluate(rule, incident), incident))
        return edges

    @hookimpl
    def forensics_findings(self, incident):
        return [finding_of(rule, hits, incident) for rule in self.rules
                if (rule.message or rule.message_zh) and rule.waited_on is None
                for hits in [evaluate(rule, incident)] if hits]

    @hookimpl
    def forensics_graph_findings(self, incident, analysis):
        return [finding_of(rule, hits, incident, analysis) for rule in self.rules
                if (rule.message or rule.message_zh) and rule.waited_on is not None
                for hits in [evaluate(rule, incident, analysis)] if hits]


# The shipped rules, served by this module as a built-in plugin.

def _shipped() -> RuleSet:
    return _shipped_set()


@functools.lru_cache(maxsize=1)
def _shipped_set() -> RuleSet:
    return RuleSet(shipped_rules(), "shipped")


@hookimpl
def forensics_rules():
    return _shipped().forensics_rules()


@hookimpl
def forensics_prepare():
    """Parse the shipped rules ahead of the first rule hook (the CLI calls
    this while files are still being parsed); a broken shipped file
    surfaces where it is used, as a plugin diagnostic."""
    try:
        _shipped_set()
    except Exception:  # noqa: BLE001 - reported by the hook call that needs the rules
        _shipped_set.cache_clear()


@hookimpl
def forensics_wait_edges(incident):
    return _shipped().forensics_wait_edges(incident)


@hookimpl
def forensics_findings(incident):
    return _shipped().forensics_findings(incident)


@hookimpl
def forensics_graph_findings(incident, analysis):
    return _shipped().forensics_graph_findings(incident, analysis)


# ------------------------------------------------------------------ inline tests

@dataclass(frozen=True)
class TestOutcome:
    name: str
    passed: bool
    problem: str = ""


def run_rule_tests(rule: Rule) -> list[TestOutcome]:
    """Run a rule's inline `tests:` (semgrep-style): each fixture is analysed
    with the built-in rules plus this one rule alone."""
    return [_run_test(rule, test) for test in rule.tests]


def _run_test(rule: Rule, test: RuleTest) -> TestOutcome:
    import tempfile

    from . import analyze
    from .ingest.textio import InputError
    from .plugins import BUILTIN_PLUGINS, Plugins

    label = f"{test.name} (line {test.line})"
    with tempfile.TemporaryDirectory(prefix="forensics-ruletest-") as scratch:
        if test.corpus is not None:
            folder = test.corpus if os.path.isabs(test.corpus) else os.path.join(
                os.path.dirname(rule.path), test.corpus)
            if not os.path.isdir(folder):
                return TestOutcome(label, False, f"corpus folder {test.corpus!r} not found (relative to "
                                                 f"the rule file)")
        else:
            folder = scratch
            files = dict(test.files or {})
            if test.snapshot is not None:
                files["snapshot.json"] = json.dumps(test.snapshot, indent=1, ensure_ascii=False)
            for name, text in files.items():
                with open(os.path.join(scratch, os.path.basename(name)), "w", encoding="utf-8") as handle:
                    handle.write(text)
        rule_set = RuleSet([rule], f"test:{rule.id}")
        plugins = Plugins(autoload=False, builtins=tuple(b for b in BUILTIN_PLUGINS if b != __name__))
        plugins.register(rule_set, name=f"yaml-rule-under-test:{rule.id}")
        try:
            report = analyze(folder, hung=test.hung, jobs=1, plugins=plugins)
        except InputError as exc:
            return TestOutcome(label, False, f"fixture unreadable: {exc}")
        broken = [d.message for d in plugins.diagnostics if "yaml-rule-under-test" in d.path]
        if broken:
            return TestOutcome(label, False, "rule raised: " + broken[0])
        findings = [f for f in report.findings if f.rule == rule.id]
        edges = rule_set.forensics_wait_edges(report.incident) if rule.edge_direction else []
        triggered = {r for f in findings for r in f.ranks}
        triggered |= {e.awaited if rule.edge_direction == "others_wait_for_rank" else e.waiter for e in edges}
    problems = []
    if test.triggers_on is not None and triggered != set(test.triggers_on):
        problems.append(f"expected to trigger on ranks {sorted(test.triggers_on)}, "
                        f"triggered on {sorted(triggered) or 'none'}")
    if test.triggers_on is None and triggered:
        problems.append(f"expected no trigger, triggered on ranks {sorted(triggered)}")
    if test.edges is not None:
        got = sorted({(e.waiter, e.awaited) for e in edges})
        want = sorted(set(test.edges))
        if got != want:
            problems.append(f"expected edges {want}, got {got}")
    for fragment in test.message_contains:
        if not any(fragment in f.message or fragment in f.message_zh for f in findings):
            problems.append(f"no message contains {fragment!r}")
    return TestOutcome(label, not problems, "; ".join(problems))
