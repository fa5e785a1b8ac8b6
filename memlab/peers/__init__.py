"""Peers: the memory libraries people use instead of a paper's code, run in memlab's harness.

A peer pipeline drives the peer's own package (never a re-implementation of it) with memlab's
model and embedder behind a loopback gateway (``memlab.peers.gateway``), and answers with
memlab's answer stage, so its row compares memories on the same questions, model and judge as
every other row. Install with ``pip install -e '.[peers]'``.
"""
