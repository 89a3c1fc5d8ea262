"""Throughput and memory benchmarks, run by hand: ``python -m benchmarks`` (see README.md).

Not part of the product: nothing under ``engine``, ``operators`` or ``spark_adapter`` imports
this package.
"""
