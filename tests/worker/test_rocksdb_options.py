"""Every RocksDB table of the worker gets the bounded memory options of its settings."""

from __future__ import annotations

from loopwarden.worker.settings import from_sources


def test_run_and_fleet_tables_get_the_block_cache_and_memtable_settings(tmp_path):
    from loopwarden.worker.app import create_app

    settings = from_sources(
        {"data_dir": str(tmp_path), "rocksdb_block_cache_mb": 3, "rocksdb_write_buffer_mb": 5}, environ={}
    )
    app, rt = create_app(settings)
    tables = [rt.table.table, app.loopwarden_fleet.signatures.table, app.loopwarden_fleet.sessions.table]
    for table in tables:
        options = table.data.rocksdb_options
        assert options.block_cache_size == 3 << 20, table.name
        assert options.write_buffer_size == 5 << 20, table.name


def test_the_default_rocksdb_memory_per_partition_is_bounded_small():
    """Faust's defaults: a 2 GiB block cache and 3 x 64 MiB memtables per partition, which run churn fills
    wave after wave (the soak's RSS after expiry kept growing). Ours: at most 32 MiB per partition."""
    options = from_sources({}, environ={}).rocksdb_options
    assert 3 * options["write_buffer_size"] + options["block_cache_size"] <= 32 << 20
