"""autotune: a Bayesian autotuner for LLM inference servers (vLLM, SGLang, TensorRT-LLM)."""

__version__ = "0.1.0"
