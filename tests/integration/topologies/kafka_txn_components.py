"""Controls of the transactional Kafka sink's test (tests/integration/test_kafka_txn_pipeline.py): the same
bolt with its recovery at start changed, to show that the test fails without the marker check."""

from __future__ import annotations

from typing import ClassVar

from squall.kafka.txnbolt import TransactionalKafkaBolt


class AlwaysRewrite(TransactionalKafkaBolt):
    """Writes the state's last interval again at every start, committed in Kafka or not."""

    marker_recovery: ClassVar[str] = "always"


class NeverRewrite(TransactionalKafkaBolt):
    """Takes the state's last interval as written at every start."""

    marker_recovery: ClassVar[str] = "never"
