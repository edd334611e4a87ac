"""ZooKeeper digest credentials (squall.state.ZkCredentials): parsing, the 0600 file, and what
goes to kazoo. The ACLs themselves are tested against the real ZooKeeper
(tests/integration/test_zk_acl.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from squall.state import ZK_AUTH_ENV, ZK_AUTH_FILE_ENV, ZkCredentials

pytestmark = pytest.mark.unit


def test_parse_one_line() -> None:
    assert ZkCredentials.parse("squall:s3cr:et\n") == ZkCredentials("squall", "s3cr:et")


@pytest.mark.parametrize("text", ["", "squall", ":pw", "squall:", "a b:pw", "squall:p w", "u:p\nv:q"])
def test_parse_refuses_what_is_not_user_colon_password(text: str) -> None:
    with pytest.raises(ValueError, match="the-file"):
        ZkCredentials.parse(text, "the-file")


def test_the_password_is_not_in_the_repr() -> None:
    creds = ZkCredentials.generate()
    assert creds.password not in repr(creds) and creds.user in repr(creds)


def test_generated_passwords_differ() -> None:
    assert ZkCredentials.generate().password != ZkCredentials.generate().password


def test_written_file_is_0600_and_reads_back(tmp_path: Path) -> None:
    creds = ZkCredentials.generate()
    path = creds.write(tmp_path / "auth")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ZkCredentials.from_file(path) == creds
    assert ZkCredentials.from_env({ZK_AUTH_FILE_ENV: str(path)}) == creds
    assert ZkCredentials.from_env({}) is None
    with pytest.raises(FileExistsError):
        creds.write(path)


def test_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing.*cannot read"):
        ZkCredentials.from_file(tmp_path / "missing")
    big = tmp_path / "big"
    big.write_bytes(b"u:" + b"p" * 10_000)
    with pytest.raises(ValueError, match="big.*larger than"):
        ZkCredentials.from_file(big)
    latin = tmp_path / "latin"
    latin.write_bytes(b"u:\xfc")
    with pytest.raises(ValueError, match="latin.*not UTF-8"):
        ZkCredentials.from_file(latin)


def test_kazoo_arguments() -> None:
    creds = ZkCredentials("squall", "pw")
    assert creds.auth_data() == [("digest", "squall:pw")]
    [acl] = creds.acl()
    assert acl.id.scheme == "digest" and acl.id.id.startswith("squall:") and acl.perms == 31


def test_the_line_itself_in_the_env_comes_first(tmp_path: Path) -> None:
    path = ZkCredentials("other", "pw").write(tmp_path / "auth")
    env = {ZK_AUTH_ENV: "squall:from-env\n", ZK_AUTH_FILE_ENV: str(path)}
    assert ZkCredentials.from_env(env) == ZkCredentials("squall", "from-env")
    with pytest.raises(ValueError, match=r"\$SQUALL_ZK_AUTH"):
        ZkCredentials.from_env({ZK_AUTH_ENV: "no-colon"})
