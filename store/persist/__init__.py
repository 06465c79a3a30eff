"""Persistence: the row store, its SQLite and PostgreSQL backends, the registry, the writer, feed, groups."""
