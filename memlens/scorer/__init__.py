"""What the learned value scorer reads at replay time: its decision features and its model
(a LightGBM estimator, its shippable file, and a compiled evaluator).

May import: ``memlens.simulator``, ``memlens.trace`` and ``memlens._util``; the policy
(``memlens.policies.learned``), its kernel and training (``memlens.learn``) import it.
"""
