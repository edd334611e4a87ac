"""A topology's key is a NewType (squall.topology_keys.TopologyKey): mypy refuses a bare name
handed to the cluster state where a key belongs, the mix-up that once made Kubernetes tests
read nothing (docs/design.md, "Ids"). Checked by running mypy on two small functions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = '''
from squall.stateviews import ForViewers
from squall.topology_keys import topology_key


def by_name(state: ForViewers, name: str) -> None:
    state.get_assignment(name)


def by_key(state: ForViewers, name: str, namespace: str) -> None:
    state.get_assignment(topology_key(name, namespace))
'''


def test_mypy_refuses_a_bare_name_where_the_state_takes_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api")
    monkeypatch.chdir(ROOT)  # mypy_path (pyproject.toml) is relative to the working directory
    code = tmp_path / "lookups.py"
    code.write_text(SNIPPET)
    out, err, rc = api.run(["--strict", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", "/dev/null",
                            "--follow-imports", "silent", str(code)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert rc == 1, (out, err)
    assert len(errors) == 1, out
    assert "lookups.py:7:" in errors[0] and 'expected "TopologyKey"' in errors[0], errors
