# Float ops: norms, RoPE, activations, softmax, attention.
