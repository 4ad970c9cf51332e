from loopwarden.bench.stats import percentile


def test_nearest_rank_percentile():
    values = [float(i) for i in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(values, 0.0) == 1.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) != percentile([], 0.5)  # NaN
