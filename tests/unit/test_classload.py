"""squall.classload's messages for what user code did, shared by the class checks and `squall build`."""

from __future__ import annotations

import pytest

from squall import serialization
from squall.classload import describe


def test_describe_names_what_user_code_did() -> None:
    assert describe(SystemExit(3)) == "it called sys.exit(3)"
    assert describe(SystemExit()) == "it called sys.exit(None)"
    assert describe(ValueError("boom")) == "ValueError: boom"
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt"


class PlainLoader:
    """A ClassLoader over a dict: what a test hands instead of importing."""

    def __init__(self, objects: dict[str, object], modules: set[str]) -> None:
        self.objects, self.modules = objects, modules
        self.asked: list[str] = []

    def load(self, class_path: str) -> object:
        self.asked.append(class_path)
        module = class_path.partition(":")[0]
        if module not in self.modules:
            raise ImportError(f"cannot import module '{module}'") from ModuleNotFoundError(module)
        if class_path not in self.objects:
            raise ImportError(f"module '{module}' has no attribute '{class_path.partition(':')[2]}'")
        return self.objects[class_path]


class Money:
    pass


class MoneySerializer:
    def encode(self, value: Money) -> bytes:
        return b""

    def decode(self, data: bytes) -> Money:
        return Money()


def test_serializers_are_loaded_through_the_given_loader() -> None:
    """`topology.serializers` reaches user code only through a ClassLoader: a dotted type name
    tries the longest module first, then a shorter one when that module is not there."""
    loader = PlainLoader({"pkg:money.Money": Money, "codecs:MoneySerializer": MoneySerializer},
                         {"pkg", "codecs"})
    [reg] = serialization.resolve_config({"pkg.money.Money": "codecs:MoneySerializer"}, loader)
    assert reg.cls is Money and reg.name == serialization.type_name(Money)
    assert loader.asked == ["pkg.money:Money", "pkg:money.Money", "codecs:MoneySerializer"]
    with pytest.raises(serialization.SerializationError,
                       match=r"^pkg.money.Money: serializer 'codecs:Gone': module 'codecs' has no attribute 'Gone'$"):
        serialization.resolve_config({"pkg.money.Money": "codecs:Gone"}, loader)
    with pytest.raises(serialization.SerializationError, match=r"^other.Money: type 'other.Money': cannot import it"):
        serialization.resolve_config({"other.Money": "codecs:MoneySerializer"}, loader)
