"""What the docs name exists: every test module and test the docs cite, every repository path,
every `squall` verb, and every name in a `squall`/`squall_operator` module. Docs drifted from
the code before (tests moved or removed, a module renamed) with nothing to say so.

Read as text, nothing imported but the CLI's command table. Left out: docs/performance-log.md, a
dated history that names what was tried and reverted, and a design note whose title says it is
"(not built yet)": it names what is to come. A table whose first header cell is `removed` names
what is gone on purpose (its first column is not checked).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import typer.main

from squall_operator.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "performance-log.md"
              and "(not built yet)" not in p.read_text(encoding="utf-8").partition("\n")[0]) + [ROOT / "README.md"]
# paths a doc names without claiming they are in the repository, and why
NOT_IN_THE_REPOSITORY = {
    "scripts/test.cold": "docs/testing.md: the copy of scripts/test that its cold-run recipe has the reader make",
}
_TOP = r"(?:worker_image|operator|tests|scripts|examples|helm|bench|docs|\.github)"
_PATH = re.compile(rf"(?<![\w/.-]){_TOP}/[\w./-]*[\w/]")
_TEST = re.compile(r"\b(?:(test_\w+)\.py(?:::(test_\w+))?|(test_\w+))\b")
_VERB = re.compile(r"`squall ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
_DOTTED = re.compile(r"`((squall|squall_operator)(?:\.\w+)+)")
_PACKAGES = {"squall": ROOT / "worker_image" / "squall", "squall_operator": ROOT / "operator" / "squall_operator"}


def lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a doc, less the first column of its `removed` tables."""
    removed = False
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            removed = False
        elif re.match(r"\|\s*removed\s*\|", line):
            removed = True
        if removed:
            line = "|" + line.split("|", 2)[2] if line.count("|") > 2 else ""
        yield n, line


@cache
def modules_in_tests() -> dict[str, Path]:
    return {p.stem: p for p in ROOT.glob("tests/**/*.py")}


@cache
def names_in_tests() -> frozenset[str]:
    """Every function and class defined in the tests (tests, fixtures, helpers)."""
    names: set[str] = set()
    for path in modules_in_tests().values():
        names.update(re.findall(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", path.read_text(encoding="utf-8"), re.M))
    return frozenset(names)


def defined_in(path: Path, name: str, *, prefix: bool = False) -> bool:
    """Whether a module's source defines or imports `name` (a def, a class, an assignment, an
    import, or a string in its __all__); with `prefix`, a name starting so (`test_health_*`)."""
    text = path.read_text(encoding="utf-8")
    n = re.escape(name) + (r"\w*" if prefix else "")
    return bool(re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{n}\b|^\s*{n}\s*[:=]|^\s*(?:from|import)\b.*\b{n}\b"
                          rf"|[\"']{n}[\"']", text, re.M))


def module_claim(dotted: str) -> str | None:
    """What is wrong with a dotted name in a doc, or None. Names under `squall.<module>` and
    `squall_operator` are checked; `squall.<lowercase>` that is no module is a config key, a
    logger or an annotation (`squall.executor.isolated`, `squall.io/...`), and a class right
    under `squall` is checked in its __init__."""
    parts = dotted.split(".")
    path = _PACKAGES[parts[0]]
    i = 1
    while i < len(parts) and ((path / parts[i]).is_dir() or (path / f"{parts[i]}.py").is_file()):
        path = path / parts[i]
        i += 1
    if i == len(parts):
        return None
    if parts[0] == "squall" and i == 1 and not parts[1][:1].isupper():
        return None
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if defined_in(source, parts[i]):
        return None
    return f"{'.'.join(parts[:i])} has no {parts[i]!r}"


@cache
def verbs() -> dict[str, frozenset[str]]:
    """`squall` verb -> its own verbs (`squall kafka up`)."""
    commands: dict[str, object] = getattr(typer.main.get_command(app), "commands")  # a group's
    return {name: frozenset(getattr(cmd, "commands", {})) for name, cmd in commands.items()}


def claims(where: str, text: str) -> Iterator[str]:
    """Each thing a doc's `text` names that does not exist, as 'where:line: what'."""
    for n, line in lines(text):
        for m in _PATH.finditer(line):
            p = m.group(0).rstrip(".")
            if p not in NOT_IN_THE_REPOSITORY and not (ROOT / p).exists():
                yield f"{where}:{n}: no file or folder {p}"
        for m in _TEST.finditer(line):
            module, func, bare = m.groups()
            if module is not None:
                if module not in modules_in_tests():
                    yield f"{where}:{n}: no test module {module}.py"
                elif func is not None and not defined_in(modules_in_tests()[module], func, prefix=func.endswith("_")):
                    yield f"{where}:{n}: {module}.py has no {func}"
            elif bare not in modules_in_tests() and bare not in names_in_tests() and not (
                    bare.endswith("_") and any(t.startswith(bare) for t in names_in_tests())):
                yield f"{where}:{n}: no test or test module {bare}"
        for m in _VERB.finditer(line):
            verb, sub = m.groups()
            if verb not in verbs():
                yield f"{where}:{n}: no verb `squall {verb}`"
            elif verbs()[verb] and sub is not None and sub not in verbs()[verb]:
                yield f"{where}:{n}: no verb `squall {verb} {sub}`"
        for m in _DOTTED.finditer(line):
            wrong = module_claim(m.group(1))
            if wrong is not None:
                yield f"{where}:{n}: {m.group(1)}: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_what_a_doc_names_exists(doc: Path) -> None:
    wrong = list(claims(str(doc.relative_to(ROOT)), doc.read_text(encoding="utf-8")))
    assert not wrong, "\n".join(wrong)


def test_design_lists_the_pure_core_of_the_contract() -> None:
    """docs/design.md's pure-core list is the import-linter contract's, module for module."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    (pure,) = [c for c in contracts if c["name"] == "The pure core imports no kopf, kazoo or zmq"]
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    bullet = design[design.index("\n- Pure core"):]
    bullet = bullet[:bullet.index("\n- ", 1)]
    listed = set(re.findall(r"`((?:squall|squall_operator)(?:\.\w+)+)`", bullet))
    contract = set(pure["source_modules"])
    assert listed == contract, (f"docs/design.md's 'Pure core' bullet and the contract differ: name "
                                f"{sorted(contract - listed)} there, drop {sorted(listed - contract)}")


def test_the_check_finds_what_is_not_there() -> None:
    """The checker on a doc of its own: each kind of claim, true and false."""
    text = "\n".join([
        "`tests/unit/test_doc_claims.py` and `tests/unit/test_no_such_file.py`",
        "`test_doc_claims.py::test_what_a_doc_names_exists`, `test_doc_claims.py::test_gone`, `test_gone_too`",
        "`squall run`, `squall kafka up`, `squall frobnicate`, `squall kafka down`",
        "`squall.classload.ModuleLoader`, `squall.classload.Gone`, `squall.executor.isolated`, `squall.Nope`",
        "| removed | covered by |",
        "| `test_removed_on_purpose` | `test_what_a_doc_names_exists` |",
        "",
        "`test_removed_on_purpose`",
    ])
    assert list(claims("doc.md", text)) == [
        "doc.md:1: no file or folder tests/unit/test_no_such_file.py",
        "doc.md:1: no test module test_no_such_file.py",
        "doc.md:2: test_doc_claims.py has no test_gone",
        "doc.md:2: no test or test module test_gone_too",
        "doc.md:3: no verb `squall frobnicate`",
        "doc.md:3: no verb `squall kafka down`",
        "doc.md:4: squall.classload.Gone: squall.classload has no 'Gone'",
        "doc.md:4: squall.Nope: squall has no 'Nope'",
        "doc.md:8: no test or test module test_removed_on_purpose",
    ]
