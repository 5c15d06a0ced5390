"""Mergeable accumulators over RequestRecords: histograms, per-endpoint stats, the time series."""
