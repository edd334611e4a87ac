"""The worker's choice of allocator (squall.worker.allocator.decide): plain environments, the
library lookup, "already loaded" and "the topology has windows" passed in. The real
re-execution is tested with real processes and workers in
tests/integration/test_worker_allocator_live.py."""

from __future__ import annotations

import pytest

from squall.worker.allocator import ENV, JEMALLOC, MARK, PYMALLOC, decide, decided_early

LIB = "libjemalloc.so.2"


def found() -> str | None:
    return LIB


def missing() -> str | None:
    return None


def must_not_look() -> str | None:
    raise AssertionError("looked for jemalloc")


def test_auto_keeps_cpythons_allocator_for_a_topology_without_windows() -> None:
    d = decide({}, must_not_look, loaded=False, windowed=False)
    assert (d.allocator, d.exec_env, d.warn) == (PYMALLOC, None, False)
    assert "no windowed bolt" in d.message


def test_auto_re_executes_a_windowed_topologys_worker_with_jemalloc_preloaded() -> None:
    env = {"PATH": "/usr/bin", "PYTHONPATH": "/app"}
    d = decide(env, found, loaded=False, windowed=True)
    assert d.allocator == JEMALLOC and not d.warn
    assert d.exec_env is not None
    assert d.exec_env["LD_PRELOAD"] == LIB
    assert d.exec_env["PYTHONMALLOC"] == "malloc"
    assert d.exec_env[MARK] == ""  # nothing was preloaded before
    # everything else is passed on unchanged, and the caller's mapping is not touched
    assert {k: d.exec_env[k] for k in env} == env
    assert env == {"PATH": "/usr/bin", "PYTHONPATH": "/app"}
    assert "windowed bolts" in d.message


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("value", ["jemalloc", " JeMalloc "])
def test_jemalloc_asked_for_by_name_whatever_the_topology(value: str, windowed: bool) -> None:
    d = decide({ENV: value}, found, loaded=False, windowed=windowed)
    assert d.allocator == JEMALLOC and d.exec_env is not None
    assert f"{ENV}=" in d.message


@pytest.mark.parametrize("value", ["pymalloc", "PYMALLOC"])
def test_pymalloc_asked_for_runs_as_started_even_with_windows(value: str) -> None:
    d = decide({ENV: value}, must_not_look, loaded=False, windowed=True)
    assert (d.allocator, d.exec_env, d.warn) == (PYMALLOC, None, False)


def test_a_preload_the_user_had_is_kept_after_jemalloc_and_remembered() -> None:
    d = decide({"LD_PRELOAD": "/opt/libtrace.so"}, found, loaded=False, windowed=True)
    assert d.exec_env is not None
    assert d.exec_env["LD_PRELOAD"] == f"{LIB}:/opt/libtrace.so"
    assert d.exec_env[MARK] == "/opt/libtrace.so"


def test_the_re_executed_process_does_not_re_execute_again() -> None:
    env = {MARK: "", "LD_PRELOAD": LIB, "PYTHONMALLOC": "malloc"}
    assert decided_early(env)  # settled before the topology is read again
    d = decide(env, found, loaded=True)
    assert (d.allocator, d.exec_env, d.warn) == (JEMALLOC, None, False)
    assert "re-executed" in d.message


def test_a_preload_that_did_not_take_is_reported_and_not_retried() -> None:
    d = decide({MARK: "", "LD_PRELOAD": LIB, "PYTHONMALLOC": "malloc"}, found, loaded=False, windowed=True)
    assert (d.allocator, d.exec_env, d.warn) == (PYMALLOC, None, True)
    assert "not in the process" in d.message


def test_jemalloc_preloaded_by_the_user_is_used_as_it_is() -> None:
    d = decide({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "PYTHONMALLOC": "malloc"}, found, loaded=True,
               windowed=True)
    assert (d.allocator, d.exec_env, d.warn) == (JEMALLOC, None, False)
    assert d.message == "allocator: jemalloc (preloaded by the environment)"
    # without PYTHONMALLOC=malloc only what CPython does not allocate itself goes to it: said so
    half = decide({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, found, loaded=True, windowed=True)
    assert (half.allocator, half.exec_env) == (JEMALLOC, None)
    assert "small objects stay on CPython's own" in half.message
    # also where auto would not have chosen it: left as is, not a warning
    plain = decide({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, found, loaded=True, windowed=False)
    assert (plain.allocator, plain.exec_env, plain.warn) == (JEMALLOC, None, False)


def test_pymalloc_by_name_while_jemalloc_is_preloaded_is_a_warning() -> None:
    d = decide({ENV: "pymalloc", "LD_PRELOAD": LIB}, found, loaded=True)
    assert (d.allocator, d.exec_env, d.warn) == (JEMALLOC, None, True)
    assert "left as is" in d.message


def test_without_the_library_the_worker_runs_on_cpythons_allocator_and_says_how_to_get_it() -> None:
    d = decide({}, missing, loaded=False, windowed=True)
    assert (d.allocator, d.exec_env, d.warn) == (PYMALLOC, None, False)
    assert "libjemalloc2" in d.message and f"{ENV}=pymalloc" in d.message
    # asked for by name, its absence is a warning
    named = decide({ENV: "jemalloc"}, missing, loaded=False)
    assert (named.allocator, named.exec_env, named.warn) == (PYMALLOC, None, True)


def test_a_pythonmalloc_the_user_set_is_respected() -> None:
    d = decide({"PYTHONMALLOC": "debug"}, found, loaded=False, windowed=True)
    assert (d.allocator, d.exec_env) == (PYMALLOC, None)
    assert "PYTHONMALLOC=debug" in d.message


def test_when_the_decision_waits_for_the_topology() -> None:
    assert not decided_early({})
    assert not decided_early({ENV: "auto"})
    assert not decided_early({ENV: " "})
    assert decided_early({ENV: "jemalloc"})
    assert decided_early({ENV: "pymalloc"})


@pytest.mark.parametrize("call", [lambda env: decide(env, found, loaded=False), decided_early])
def test_an_unknown_allocator_is_an_error_naming_the_variable_and_the_choices(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as err:
        call({ENV: "tcmalloc"})
    assert ENV in str(err.value) and "'tcmalloc'" in str(err.value)
    assert all(c in str(err.value) for c in ("auto", "jemalloc", "pymalloc"))
