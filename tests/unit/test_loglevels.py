"""squall.loglevels: Storm's `set_log_level` settings, the stored config, and what a worker does
with it at a given time (plain values, an injected time)."""

from __future__ import annotations

import pytest

from squall import loglevels
from squall.loglevels import LogLevelError, merge, parse_config, parse_setting, plan

pytestmark = pytest.mark.unit

NOW = 1_000_000.0


def test_settings_in_storms_syntax() -> None:
    assert parse_setting("ROOT=DEBUG:30") == ("ROOT", "DEBUG", 30.0)
    assert parse_setting("squall.executor=warn") == ("squall.executor", "WARN", None)
    assert parse_setting("my_app.db-pool=TRACE:0.5") == ("my_app.db-pool", "TRACE", 0.5)
    for bad, says in [("ROOT", "expected LOGGER=LEVEL"), ("ROOT=LOUD", "unknown log level 'LOUD'"),
                      ("ROOT=DEBUG:soon", "not a number of seconds"), ("ROOT=DEBUG:0", "above 0"),
                      ("ROOT=DEBUG:inf", "above 0"), ("=DEBUG", "expected LOGGER=LEVEL"),
                      ("a b=DEBUG", "not a logger name")]:
        with pytest.raises(LogLevelError, match=says):
            parse_setting(bad)


def test_storm_level_names_map_to_pythons() -> None:
    assert loglevels.python_level("WARN") == 30 and loglevels.python_level("fatal") == 50
    assert loglevels.python_level("TRACE") < 10 < loglevels.python_level("OFF") > 50


def test_merge_sets_times_out_and_removes() -> None:
    config = merge({}, [parse_setting("ROOT=DEBUG:30"), parse_setting("squall=INFO")], [], NOW)
    assert config == {"ROOT": {"level": "DEBUG", "expires": NOW + 30}, "squall": {"level": "INFO", "expires": None}}
    later = merge(config, [parse_setting("kafka=ERROR:5")], ["squall"], NOW + 40)
    # ROOT's setting lapsed at NOW + 30: dropped with the removal of squall
    assert later == {"kafka": {"level": "ERROR", "expires": NOW + 45}}


def test_a_stored_config_is_checked() -> None:
    assert parse_config({"ROOT": {"level": "debug", "expires": 5}}) == {"ROOT": {"level": "DEBUG", "expires": 5.0}}
    for bad, says in [([], "an object"), ({"ROOT": "DEBUG"}, "expected an object"),
                      ({"ROOT": {"expires": None}}, "no level"), ({"ROOT": {"level": "DEBUG", "expires": "x"}}, "expires"),
                      ({f"l{i}": {"level": "INFO"} for i in range(101)}, "at most 100")]:
        with pytest.raises(LogLevelError, match=says):
            parse_config(bad)


def test_a_worker_sets_then_gives_back_the_level_it_found() -> None:
    config = {"ROOT": {"level": "DEBUG", "expires": NOW + 30}, "squall": {"level": "ERROR", "expires": None}}
    originals: dict[str, int] = {}
    current = {"ROOT": 20, "squall": 0}
    p = plan(config, NOW, originals, current)
    assert p.set == {"ROOT": 10, "squall": 40} and p.reset == {} and p.next_check == NOW + 30
    # the worker applies it, remembering what it found
    originals = {"ROOT": 20, "squall": 0}
    current = {"ROOT": 10, "squall": 40}
    assert plan(config, NOW + 10, originals, current) == loglevels.Plan({}, {}, NOW + 30)
    # ROOT's setting lapses: ROOT gets its own level back; squall's stays
    assert plan(config, NOW + 30, originals, current) == loglevels.Plan({}, {"ROOT": 20}, None)
    # `-r squall`: the config loses it, the worker gives it back its own (NOTSET) level
    assert plan({}, NOW + 31, {"squall": 0}, {"squall": 40}) == loglevels.Plan({}, {"squall": 0}, None)
