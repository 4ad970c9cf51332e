"""The only place that touches private attributes of Faust, mode and aiokafka.

- :mod:`~loopwarden.internals.faust_consumer`: our transport (fetch wait, Tansu's end offsets, batch hand-over);
- :mod:`~loopwarden.internals.faust_table`: partition-explicit RocksDB access for the run table;
- :mod:`~loopwarden.internals.faust_worker`: the worker class (log level);
- :mod:`~loopwarden.internals.aiokafka_client`: metadata refresh and forced close for the runner's listener
  (imports no Faust, so runner-only installs can use it).

Each private name used is listed in its module's docstring and checked by
``tests/internals/test_internals_contract.py``, which fails loudly on an upgrade
that renames or removes one.
"""
