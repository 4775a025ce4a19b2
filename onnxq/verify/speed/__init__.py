"""How fast the quantized model runs against the float one: interleaved latency on each provider (latency), and a decoder one token at a time with its KV cache (decode)."""
