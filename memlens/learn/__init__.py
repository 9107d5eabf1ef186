"""Learning a value scorer from people: feedback rows and their store, the simulated user,
labels for decision points, ``memlens train`` and ``memlens tune``.

The parts the learned scorer reads at replay time (decision features, the model file and its
compiled evaluator) are in ``memlens.scorer``: a policy and a kernel import them, and nothing
they import may depend on training.

May import: ``memlens.runs`` and everything below it; never ``present``, ``ui`` or ``cli``.
"""
