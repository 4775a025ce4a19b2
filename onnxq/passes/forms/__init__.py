"""Rewrite forms by name (registry) and the one quantize pass that dispatches every plan to its form: qdq, dynamic, blockwise, conv_integer, LSTM, attention, embeddings, tied tables."""
