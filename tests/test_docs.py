"""Every command the README and the documentation site show is run, so none goes stale.

A documented ``memlens`` command of a Hydra subcommand (simulate, compare, recommend, train,
tune) goes through exactly the checks the command line runs before any work
(``memlens.config.app.validate``: composition, the typed settings, the command's own checks),
in a scratch folder where the trace files it names exist (the bundled trace stands in). A
command shown with the ``error:`` line it prints (``$ memlens ...`` then ``error: ...``) must
be refused with that line, word for word. The other subcommands must exist and list the verb
used. The help blocks of the CLI reference must be the commands' current help.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
HYDRA_COMMANDS = ("simulate", "compare", "recommend", "train", "tune")
TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json")
FENCE = re.compile(r"^\s*```")


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    argv: tuple[str, ...]
    error: str | None  # the error line the page shows it printing

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"


def _logical_lines(block: list[tuple[int, str]]):
    """(line number, text) with backslash continuations joined."""
    pending, start = "", 0
    for number, text in block:
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        yield start, pending + text
        pending = ""


def _commands_of(page: Path) -> list[Command]:
    rel = str(page.relative_to(REPO))
    found, block, inside = [], [], False
    for number, text in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(text):
            if inside:
                found += _commands_in_block(rel, block)
            inside, block = not inside, []
            continue
        if inside:
            block.append((number, text))
    return found


#: Where a shell line's command ends: what follows is the shell's, not memlens's.
SHELL_OPERATORS = {"&", "&&", "|", "||", ";", ">", ">>", "2>", "2>&1", "<"}


def _commands_in_block(page: str, block: list[tuple[int, str]]) -> list[Command]:
    """A console block (``$ `` prompts) holds commands only after prompts, output between them;
    in a plain block every line starting with ``memlens`` is a command."""
    lines = list(_logical_lines(block))
    console = any(text.strip().startswith("$ ") for _, text in lines)
    out = []
    for k, (number, text) in enumerate(lines):
        stripped = text.strip()
        prefix = "$ memlens " if console else "memlens "
        if not stripped.startswith(prefix):
            continue
        command = stripped[2:] if console else stripped
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        cut = next((i for i, w in enumerate(words) if w in SHELL_OPERATORS), len(words))
        argv = tuple(words[:cut])
        error = None
        if console and k + 1 < len(lines) and lines[k + 1][1].startswith("error: "):
            error = lines[k + 1][1]
        out.append(Command(page, number, argv, error))
    return out


def documented_commands() -> list[Command]:
    return [c for page in PAGES for c in _commands_of(page)]


COMMANDS = documented_commands()


def test_the_docs_show_commands_at_all():
    assert len(COMMANDS) > 50  # an extraction that finds nothing would pass everything below
    assert {c.argv[1] for c in COMMANDS if len(c.argv) > 1} >= {"simulate", "compare", "data"}


def _stand_in_files(argv: tuple[str, ...], where: Path) -> None:
    """The input files a documented command names, in the scratch folder: a path of the
    checkout (the pages run from its top) is linked in; any other trace is a copy of the
    bundled one, any other model a copy of the bundled model (what the page made earlier)."""
    from memlens.config.store import DATA_DIR

    models = REPO / "memlens" / "models"
    for arg in argv:
        key, _, value = arg.partition("=")
        key = key.lstrip("+")
        if key not in ("trace", "traces", "policy.model", "split"):
            continue
        for name in value.strip("[]").split(","):
            path = where / name
            if not name or Path(name).is_absolute() or ":" in name or path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / name).exists():
                path.symlink_to(REPO / name)
            elif key == "policy.model" and name.endswith(".txt"):
                shutil.copyfile(models / "default_learned.txt", path)
                shutil.copyfile(models / "default_learned.json", path.with_suffix(".json"))
            elif name.endswith(TRACE_SUFFIXES):  # a trace, or split=TRACE (split by stream)
                shutil.copyfile(DATA_DIR / "default" / "agent-small.jsonl.gz", path)


def _bad_trace_shown(command: Command) -> bool:
    """The page shows the error of a bad trace file it made (cut in half, Latin-1, ...)."""
    names = [a.partition("=")[2] for a in command.argv if a.startswith("trace=")]
    return bool(
        command.error
        and names
        and re.match(rf"error: (\S*/)?{re.escape(Path(names[0]).name)}:\d+:", command.error)
    )


def _validate(command: Command, capsys) -> str | None:
    """Run the command line's pre-flight checks; the ``error:`` line, or None when it passed."""
    from memlens.cli.main import policy_overrides_to_list
    from memlens.cli.replay import check_compare, check_recommend, check_simulate
    from memlens.config.app import validate
    from memlens.learn.train import check_train
    from memlens.learn.tune import check_tune

    checks = {"simulate": check_simulate, "compare": check_compare,
              "recommend": check_recommend, "train": check_train, "tune": check_tune}  # fmt: skip
    name, rest = command.argv[1], list(command.argv[2:])
    if name == "train":  # as memlens.cli.main does: split=FILE or split=TRACE
        from memlens.learn.splits import split_argument

        rest = split_argument(rest)
    if name in ("compare", "recommend"):
        try:
            rest = policy_overrides_to_list(rest)
        except SystemExit:
            return capsys.readouterr().err.strip()
    try:
        validate(name, rest, checks[name])
    except SystemExit as exc:
        assert exc.code == 2, command.label
        return capsys.readouterr().err.strip().splitlines()[-1]
    return None


HYDRA = [c for c in COMMANDS if len(c.argv) > 1 and c.argv[1] in HYDRA_COMMANDS]


@pytest.mark.parametrize("command", HYDRA, ids=[c.label for c in HYDRA])
def test_every_documented_run_command_passes_or_fails_as_shown(command, tmp_path, monkeypatch,
                                                                capsys):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    if _bad_trace_shown(command):
        pytest.skip("the page makes this bad trace in its own shell steps, not rerun here")
    _stand_in_files(command.argv, tmp_path)
    got = _validate(command, capsys)
    if command.error is None:
        assert got is None, f"{command.label}: `{' '.join(command.argv)}` is refused: {got}"
    else:
        assert got == command.error, f"{command.label}: the page shows another error"


OTHERS = [c for c in COMMANDS if c not in HYDRA]


def _usage(name: str) -> str:
    import importlib

    return importlib.import_module(f"memlens.cli.{name}").USAGE


def test_every_other_documented_command_names_a_real_subcommand_and_verb():
    from memlens.cli.main import USAGE

    subcommands = set(re.findall(r"^  (\w+)  ", USAGE, re.M))
    for command in OTHERS:
        if len(command.argv) < 2 or command.argv[1].startswith("-"):
            continue
        name = command.argv[1]
        assert name in subcommands, f"{command.label}: no subcommand {name!r}"
        verb = command.argv[2] if len(command.argv) > 2 else None
        if verb and verb.startswith("<"):  # a usage line's placeholder (<command>)
            continue
        if name in ("data", "cache", "feedback") and verb and not verb.startswith("-"):  # usages
            assert re.search(rf"^\s+{re.escape(verb)}\b", _usage(name), re.M), \
                f"{command.label}: memlens {name} has no {verb!r}"  # fmt: skip


HELP = re.compile(r"<!-- help: ([^>]*) -->\n```text\n(.*?)```", re.S)


def test_the_cli_reference_is_the_commands_own_help():
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    blocks = HELP.findall(page)
    assert len(blocks) >= 5
    exe = Path(sys.executable).parent / "memlens"
    for args, shown in blocks:
        now = subprocess.run([str(exe), *args.split()], capture_output=True, text=True).stdout
        assert shown.rstrip() == now.rstrip(), f"docs/reference/cli.md: `memlens {args}` changed"
