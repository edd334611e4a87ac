"""squall.classload's messages for what user code did, shared by the class checks and `squall build`."""

from __future__ import annotations

from squall.classload import describe


def test_describe_names_what_user_code_did() -> None:
    assert describe(SystemExit(3)) == "it called sys.exit(3)"
    assert describe(SystemExit()) == "it called sys.exit(None)"
    assert describe(ValueError("boom")) == "ValueError: boom"
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt"
