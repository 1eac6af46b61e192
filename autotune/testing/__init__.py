"""Fakes for testing autotune and code built on it, in layers (like httpx's MockTransport):

- ``autotune.testing.scripted``: a deterministic OpenAI-compatible streaming server with scripted timings and faults,
  also a stand-in engine that takes vLLM's command line (``python -m autotune.testing.scripted serve MODEL ...``);
- ``autotune.testing.sim``: the simulated engine on the seed study's node, and its server through the launch path;
- ``autotune.testing.seedset``: the simulator's calibration set (the seed study's runs and their configurations);
- ``autotune.testing.spaces``: spaces written from the shipped ones (the quickstart in direct simulation);
- ``autotune.testing.vllm_cpu``: real vLLM on CPU with a tiny model, through autotune's launch path;
- ``autotune.testing.browser``: headless Chromium and ``autotune dashboard`` served for it;
- ``autotune.testing.hub_cache``: a model directory saved in the Hugging Face cache layout (a hub id, offline).

Importing this package imports none of them: each is imported where it is used.
"""
