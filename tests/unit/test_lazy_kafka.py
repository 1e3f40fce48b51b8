"""The command line's trimmed confluent-kafka import: the same objects, without asyncio, every name still there."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json, sys
from airflow_kafka_spark.cli import _lazy_kafka
_lazy_kafka.install()
from confluent_kafka import Consumer, KafkaError, TopicPartition, IsolationLevel, ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, OffsetSpec
light = "asyncio" not in sys.modules
ids = [id(Consumer), id(KafkaError), id(TopicPartition), id(IsolationLevel), id(AdminClient)]
from confluent_kafka import SerializingProducer   # not in cimpl/_model: the real __init__ runs once
import confluent_kafka, confluent_kafka.cimpl as cimpl, confluent_kafka._model as model
same = [id(confluent_kafka.Consumer), id(confluent_kafka.KafkaError), id(confluent_kafka.TopicPartition),
        id(confluent_kafka.IsolationLevel), id(confluent_kafka.admin.AdminClient)]
print(json.dumps({"light": light, "same": ids == same, "cimpl": Consumer is cimpl.Consumer,
                  "model": IsolationLevel is model.IsolationLevel, "full": "asyncio" in sys.modules,
                  "serde": SerializingProducer.__module__, "missing": hasattr(confluent_kafka, "NoSuchThing")}))
"""


def test_the_cli_imports_the_kafka_client_without_asyncio_and_loses_no_name():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"light": True, "same": True, "cimpl": True, "model": True, "full": True,
                   "serde": "confluent_kafka.serializing_producer", "missing": False}, got


def test_an_already_imported_package_is_left_alone():
    probe = ("import sys, confluent_kafka as real\nfrom airflow_kafka_spark.cli import _lazy_kafka\n"
             "_lazy_kafka.install()\nprint(sys.modules['confluent_kafka'] is real)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "True"
