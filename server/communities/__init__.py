"""Community detection over a concept graph and the chat prompts that summarise communities."""
