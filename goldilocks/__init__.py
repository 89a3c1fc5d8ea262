"""Goldilocks applications: floor 2, above ``engine``, ``operators`` and ``eventlog``.

- ``goldilocks.replay``: replay recorded event logs through a time policy (``replay(...)``);
  its columnar run in ``goldilocks.columnar``, reading ahead in ``goldilocks.ahead``, safe
  output files in ``goldilocks.outputs``.
- ``goldilocks.cli``: the ``goldilocks`` command line; ``python -m goldilocks`` runs it.
- ``goldilocks.plot``: the replay's picture (the ``plot`` extra).
- ``goldilocks.net``: devices over WebSocket and TCP, ``goldilocks serve`` (the ``net`` extra).

Nothing is imported here, so ``import goldilocks.replay`` costs no network or plotting code.
"""

__all__: list[str] = []
