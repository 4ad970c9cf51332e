"""Every RocksDB table of the worker gets the bounded memory options of its settings."""

from __future__ import annotations

from streams.worker.settings import from_sources


def test_run_and_fleet_tables_get_the_block_cache_and_memtable_settings(tmp_path):
    from streams.worker.app import create_app

    settings = from_sources({"data_dir": str(tmp_path), "rocksdb_block_cache_mb": 3,
                             "rocksdb_write_buffer_mb": 5}, environ={})
    app, rt = create_app(settings)
    tables = [rt.table.table, app.loopwarden_fleet.signatures.table, app.loopwarden_fleet.sessions.table]
    for table in tables:
        options = table.data.rocksdb_options
        assert options.block_cache_size == 3 << 20, table.name
        assert options.write_buffer_size == 5 << 20, table.name


def test_the_default_block_cache_is_far_below_fausts_two_gib_per_partition():
    settings = from_sources({}, environ={})
    assert settings.rocksdb_options["block_cache_size"] <= 64 << 20
