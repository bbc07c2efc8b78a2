"""The files the trainer writes and the platform reads: the record schema and its
lines, samples, the run file (secrets masked), the append-only line file, and where
they go when nobody says (locations.py: the user's data directory).

Imports nothing else of the trainer side: the platform reuses it as the contract.
"""
