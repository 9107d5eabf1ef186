"""Small helpers every layer may use: atomic writes, the cache folder and its safe entries,
process identity, malloc tuning, parallel jobs, and setting values the schema's types let
through.

May import: nothing else of MemLens.
"""
