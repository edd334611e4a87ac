"""kopf decides whether a resource's update handlers run by diffing its essence, built as
kopf's processing does (the diff base storage's `build` with the registry's extra fields, then
the progress storage's `clear`). Both leave out every annotation under the operator's storage
prefix (squall.io/): `kubectl squall set-log-level` once kept its setting at squall.io/log-levels,
and the operator never heard of the change (found on the real nodes: the workers kept their
levels). Its annotation now lives outside that prefix; checked on kopf's own code with the
handlers squall_operator.handlers registers and the storages it configures."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest
import squall_operator.handlers  # noqa: F401  # registers the operator's handlers
from kopf._cogs.structs import bodies, diffs
from squall_operator.crd import GROUP, PLURAL, VERSION
from squall_operator.resources import LOG_LEVELS_ANNOTATION

pytestmark = pytest.mark.unit


def essence(annotations: dict[str, str]) -> Any:
    """What kopf compares for a Topology with `annotations` (processing.py's detect causes)."""
    diffbase = kopf.AnnotationsDiffBaseStorage(prefix="squall.io", key="last-handled-configuration")
    progress = kopf.AnnotationsProgressStorage(prefix="squall.io")  # as handlers.startup sets them
    extra = kopf.get_default_registry()._changing.get_extra_fields(resource=kopf.Resource(GROUP, VERSION, PLURAL))
    body = bodies.Body({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology",
                        "metadata": {"name": "wc", "annotations": {"squall.io/kopf-managed": "yes", **annotations}},
                        "spec": {"numWorkers": 2}})
    return progress.clear(essence=diffbase.build(body=body, extra_fields=extra))


def test_a_set_log_level_annotation_change_is_a_change_kopf_hands_to_the_update_handler() -> None:
    config = json.dumps({"ROOT": {"level": "DEBUG", "expires": None}})
    assert diffs.diff(essence({}), essence({LOG_LEVELS_ANNOTATION: config}))
    # the name it had: invisible to kopf, which is why it moved
    assert not diffs.diff(essence({}), essence({"squall.io/log-levels": config}))
    assert not LOG_LEVELS_ANNOTATION.startswith("squall.io/")
