"""The values inside a tool call's string arguments: shell commands, Python, SQL, file:line.

A coding agent's tool arguments are rarely whole values an earlier message holds: they are
commands (``open src/x.py 120``, ``grep -n foo src/``, ``python reproduce.py``), code and
queries, whose *parts* came from somewhere (a path a listing showed, a symbol a file defined,
a line number a search printed).  :func:`pieces` splits one argument string into those parts,
so that each is traced to the item that introduced it; the words that belong to the language
(the program a shell command runs, its flags, Python keywords and builtins, SQL keywords) are
not values and are left out.  Parsing uses the standard library: :mod:`shlex` for shell,
:mod:`ast` (or :mod:`tokenize` when the code does not parse) for Python, a token pattern for
SQL; every parser is total (a string it cannot read falls back to its whitespace words).
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import re
import shlex
import tokenize

FILE_LINE = re.compile(r"^(?P<path>[\w./~\-]*[\w\-]\.?\w*):(?P<line>\d+)(?::(?P<col>\d+))?:?$")
_SQL_START = re.compile(r"^\s*(select|insert|update|delete|with|create|alter|drop)\b", re.I)
_SQL_TOKEN = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|[A-Za-z_][\w.]*|\d+(?:\.\d+)?")
_SQL_KEYWORDS = frozenset(
    """select from where and or not in is null as on join left right inner outer full cross
    group by order having limit offset insert into values update set delete with create table
    alter drop distinct count sum avg min max like between case when then else end union all
    asc desc exists index primary key references default integer text varchar int real""".split()
)
_SHELL_SEPARATORS = frozenset({"|", "||", "&", "&&", ";", ";;", "(", ")", ">", ">>", "<", "<<",
                               "2>", "2>&1", "&>"})  # fmt: skip
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "xargs", "exec", "command"})
# programs whose first operand is a subcommand (``git diff``), not a value
_SUBCOMMANDS = frozenset({"git", "pip", "pip3", "conda", "docker", "npm", "yarn", "cargo", "go",
                          "kubectl", "poetry", "uv", "apt", "apt-get", "brew", "make"})  # fmt: skip
_PROSE_WORD = re.compile(r"^[A-Za-z][a-z]*[,.!?]?$")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@.\-/]*[A-Za-z0-9]|[0-9]")
_NOT_VALUES = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"self", "cls"}
_CODE_HINT = re.compile(r"\n|^\s*(def|class|import|from|for|while|if|with|return|print)\b|\w\(")


def kind_of(text: str) -> str:
    """Which language ``text`` is read as: ``value`` (one word), ``file_line``, ``sql``,
    ``python`` (it parses, and looks like code), ``text`` (prose: four or more words, most of
    them plain words) or ``shell`` (anything else)."""
    s = text.strip()
    if not s.split() or len(s.split()) == 1 and not FILE_LINE.match(s) and "(" not in s:
        return "value"
    if FILE_LINE.match(s):
        return "file_line"
    if _SQL_START.match(s):
        return "sql"
    if _CODE_HINT.search(s):
        try:
            ast.parse(s)
            return "python"
        except (SyntaxError, ValueError):
            if "\n" in s:
                return "python"  # code that does not parse: read with tokenize
    words = s.split()
    if len(words) >= 4 and sum(bool(_PROSE_WORD.match(w)) for w in words) >= 0.75 * len(words):
        return "text"
    return "shell"


def file_line(word: str) -> list[str]:
    """``src/x.py:120:4`` -> ``["src/x.py", "120"]`` (the column is not a value anyone quotes)."""
    m = FILE_LINE.match(word)
    return [m.group("path"), m.group("line")] if m else [word]


def shell_pieces(text: str) -> list[str]:
    """Operands of every command in a shell line: not the program, not its flags; a
    ``--flag=value``'s value and ``path:line`` addresses split in two."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: the whitespace words
        words = text.split()
    out, program_next, subcommand_next = [], True, False
    for w in words:
        if w in _SHELL_SEPARATORS or set(w) <= set("|&;<>()"):
            program_next = True
            continue
        if program_next:
            program_next = w in _WRAPPERS or "=" in w and not w.startswith("-")  # VAR=1 cmd
            subcommand_next = w.rsplit("/", 1)[-1] in _SUBCOMMANDS
            continue
        if subcommand_next and not w.startswith("-"):
            subcommand_next = False
            continue
        if w.startswith("-"):
            if "=" in w:
                out.append(w.split("=", 1)[1])
            continue
        out += file_line(w)
    return [w for w in out if not keyword.iskeyword(w)]


def text_pieces(text: str) -> list[str]:
    """The words of prose that point at a source: identifiers and paths (with a digit, ``_``,
    ``/`` or ``.`` inside), numbers, and capitalised names not opening a sentence."""
    out = []
    for m in _NAME.finditer(text):
        w = m.group(0)
        before = text[: m.start()].rstrip()
        opens = not before or before[-1] in ".!?:"
        if (
            any(c.isdigit() for c in w)
            or any(c in w for c in "_/.")
            or (w[0].isupper() and not opens)
        ):
            out.append(w.rstrip("."))
    return out


def python_pieces(text: str) -> list[str]:
    """Names, attributes, imported modules, strings and numbers of a piece of Python (keywords,
    builtins and ``self`` left out)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return _python_tokens(text)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            out.append(node.name)
        elif isinstance(node, ast.alias):
            out.append(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | int | float):
            if not isinstance(node.value, bool):
                out.append(str(node.value))
    return [p for p in out if p not in _NOT_VALUES]


def _python_tokens(text: str) -> list[str]:
    """The NAME, STRING and NUMBER tokens of code :mod:`ast` cannot parse."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and tok.string not in _NOT_VALUES:
                out.append(tok.string)
            elif tok.type == tokenize.NUMBER:
                out.append(tok.string)
            elif tok.type == tokenize.STRING:
                out.append(tok.string.strip("'\"rbfuRBFU"))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def sql_pieces(text: str) -> list[str]:
    """Identifiers (tables, columns), string literals and numbers of a SQL statement."""
    out = []
    for tok in _SQL_TOKEN.findall(text):
        if tok[0] in "'\"`":
            out.append(tok[1:-1].replace("''", "'"))
        elif tok.lower() not in _SQL_KEYWORDS:
            out.append(tok)
    return out


PARSERS = {"file_line": lambda s: file_line(s.strip()), "sql": sql_pieces,
           "python": python_pieces, "shell": shell_pieces, "text": text_pieces}  # fmt: skip


def pieces(text: str) -> tuple[str, list[str]]:
    """``(kind, values)``: the values ``text`` holds, in order, distinct, each at least two
    characters (or a digit), stripped of surrounding punctuation."""
    kind = kind_of(text)
    if kind == "value":
        return kind, [text.strip()]
    seen, out = set(), []
    for p in PARSERS[kind](text):
        p = p.strip().strip(",;:'\"`")
        if (len(p) >= 2 or p.isdigit()) and p not in seen:
            seen.add(p)
            out.append(p)
    return kind, out
