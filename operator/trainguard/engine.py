"""The engine: wires signals -> detect -> attribute -> policy -> store -> act (being written)."""
