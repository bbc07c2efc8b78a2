"""The database: engine and sessions, the tables, record <-> row (docs/architecture.md)."""
