"""Zero-code fleet monitoring: loop detection from OpenTelemetry tool spans (streams/otel/OTEL.md).

``spans`` reads the Collector's Kafka exporter records (both encodings),
``mapping`` turns tool spans into events, ``ingest`` is the ``loopwarden spans``
consumer that publishes them, keyed by run, to the worker's events topic.
"""
