"""The TS conformance kit on Spark's batch replay plans (``ts_plugins.py``): every golden vector
a plan implements, all of them decided in one replay per policy and plan (each vector its own
clock group), then compared vector by vector; each skip with its reason."""

from __future__ import annotations

import pytest

from tests.spark.ts_plugins import SPARK_PLUGINS
from tests.tskit.kit import mismatch, skip_reason, vectors_for
from tests.tskit.vectors import load_vectors

pytestmark = pytest.mark.spark

VECTORS = load_vectors()


@pytest.fixture(scope="module")
def decided(spark):
    """Every plug-in's results over the vectors it runs, by plug-in and vector name: one
    batch per plug-in, made when a test first asks for it."""
    cache: dict[type, dict] = {}

    def results(plugin):
        if plugin not in cache:
            plugin.session = spark
            cache[plugin] = plugin().run_many(vectors_for(plugin, VECTORS))
        return cache[plugin]

    return results


@pytest.mark.parametrize("plugin", SPARK_PLUGINS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["name"])
def test_ts_vector(decided, plugin, vector):
    why = skip_reason(plugin, vector)
    if why is not None:
        pytest.skip(f"{plugin.name}: {why}")
    emitted, late = decided(plugin)[vector["name"]]
    problem = mismatch(vector, emitted, late)
    assert problem is None, f"{plugin.name} on {vector['name']}: {problem}"
