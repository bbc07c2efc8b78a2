"""The files the trainer writes and the platform reads: the record schema and its
lines, samples, the run file (secrets masked) and the append-only line file.

Imports nothing else of the trainer side: the platform reuses it as the contract.
"""
