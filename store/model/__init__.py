"""The in-memory model: a context, its records and passages, and bringing it in line with durable rows."""
