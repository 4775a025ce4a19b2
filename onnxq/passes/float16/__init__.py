"""Float16 compute: which nodes compute in float16 (plan), the Casts between (compute), a float16 model quantized in float32 arithmetic (model, storage) and checked without a GPU (emulation)."""
