"""Trainer side: hooks, PlatformCallback, detectors and adapters (no server imports)."""
