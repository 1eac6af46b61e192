"""autotune's simulated engine: a performance model of LLM serving behind an OpenAI-compatible server (or called
in-process), standing in for vLLM, SGLang or TensorRT-LLM where no GPU is at hand. Always labelled simulated."""
