"""The TS conformance kit on the engine's implementations: every golden vector through every
plug-in that implements what it needs (``tests/tskit/plugins.py``), each skip with its reason;
and the kit's own checks — the stored vectors are the reference's, every plug-in declares every
feature, the conformance table in ``docs/conformance.md`` is current."""

from __future__ import annotations

import pytest

from tests.tskit.kit import FEATURES, check_declaration, mismatch, skip_reason
from tests.tskit.plugins import ENGINE_PLUGINS
from tests.tskit.report import ALL_PLUGINS, DOC, render_section, split_doc
from tests.tskit.vectors import build_vectors, dumps, load_vectors, PATH

VECTORS = load_vectors()


def test_the_stored_vectors_are_the_reference_models():
    """``vectors.json`` is what the reference models decide today: a change of a model (or
    of the cases) shows here until the file is regenerated (``python -m tests.tskit.vectors
    --write``) and its diff reviewed."""
    assert PATH.read_text(encoding="utf-8") == dumps(build_vectors()), (
        "tests/tskit/vectors.json is out of date: python -m tests.tskit.vectors --write")


def test_the_vectors_cover_every_feature_and_both_actions():
    features = {f for v in VECTORS for f in v["features"]}
    assert features == set(FEATURES)
    reasons = {r[5] for v in VECTORS for r in v["late"]}
    assert {"quantile", "max_ahead", "goldilocks", "end_edge", "start_dropped", "no_start",
            "duplicate", "not_closed"} <= reasons
    actions = {r[3] for v in VECTORS for r in v["late"]}
    assert actions == {"dropped", "adjusted", "unmatched"}


@pytest.mark.parametrize("plugin", ALL_PLUGINS, ids=lambda p: p.__name__)
def test_every_plugin_declares_every_feature(plugin):
    check_declaration(plugin)
    assert plugin.name and plugin.where


@pytest.mark.parametrize("plugin", ENGINE_PLUGINS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["name"])
def test_ts_vector(plugin, vector):
    why = skip_reason(plugin, vector)
    if why is not None:
        pytest.skip(f"{plugin.name}: {why}")
    emitted, late = plugin().run(vector)
    problem = mismatch(vector, emitted, late)
    assert problem is None, f"{plugin.name} on {vector['name']}: {problem}"


def test_the_conformance_doc_has_the_current_ts_table():
    _, section = split_doc(DOC.read_text(encoding="utf-8"))
    assert section == render_section(), (
        "docs/conformance.md's TS section is out of date: python -m tests.tskit.report --write")
