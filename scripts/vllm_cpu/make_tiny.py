"""Create a tiny random-weight Llama model + offline BPE tokenizer for vLLM CPU tests.
No hub access: run with HF_HUB_OFFLINE=1."""

import glob, os, sys, sysconfig, time
import torch
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, GenerationConfig

OUT = sys.argv[1] if len(sys.argv) > 1 else "$WORK/tiny"
VOCAB = int(os.environ.get("TINY_VOCAB", 8192))
HIDDEN = int(os.environ.get("TINY_HIDDEN", 256))
LAYERS = int(os.environ.get("TINY_LAYERS", 4))
HEADS = int(os.environ.get("TINY_HEADS", 4))  # head_dim fixed at 64
t0 = time.time()
torch.manual_seed(0)

# ---- tokenizer: byte-level BPE trained on CPython's stdlib sources (always present locally)
stdlib = sysconfig.get_paths()["stdlib"]
files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[:400]
specials = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=VOCAB,
    special_tokens=specials,
    min_frequency=2,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tok.train(files, trainer)
bos_id = tok.token_to_id("<s>")
tok.post_processor = processors.TemplateProcessing(
    single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
)
hf_tok = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    bos_token="<s>",
    eos_token="</s>",
    unk_token="<unk>",
    pad_token="<pad>",
    additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    model_max_length=4096,
)
hf_tok.chat_template = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
os.makedirs(OUT, exist_ok=True)
hf_tok.save_pretrained(OUT)
real_vocab = len(hf_tok)
t1 = time.time()

# ---- model: tiny Llama, random init
cfg = LlamaConfig(
    vocab_size=real_vocab,
    hidden_size=HIDDEN,
    intermediate_size=3 * HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=max(1, HEADS // 2),
    head_dim=64,
    max_position_embeddings=4096,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=bos_id,
    eos_token_id=tok.token_to_id("</s>"),
    pad_token_id=tok.token_to_id("<pad>"),
)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(OUT, safe_serialization=True)
GenerationConfig(
    bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id
).save_pretrained(OUT)
t2 = time.time()
n = sum(p.numel() for p in model.parameters())
print(
    f"vocab={real_vocab} params={n / 1e6:.2f}M tokenizer={t1 - t0:.1f}s model={t2 - t1:.1f}s total={t2 - t0:.1f}s -> {OUT}"
)
