"""Derived indexes of a context: BM25 and its snapshot file, the spelling lexicon, index files, vectors."""
