"""Moving records in and out of a store: JSONL import, export, promote, group records."""
