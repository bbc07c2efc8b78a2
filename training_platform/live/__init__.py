"""Committed rows out to subscribers: the hub, the listener's fan-out, diagnosis, webhooks."""
