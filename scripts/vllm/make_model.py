"""A tiny random-weight Llama that vLLM can serve, made locally with no download.

    .venv-vllm/bin/python scripts/vllm/make_model.py OUT_DIR [--seed 0]

Writes OUT_DIR with config.json, generation_config.json, model.safetensors (~1.6 M parameters,
float32), and a byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json +
special_tokens_map.json, with a chat template) trained on a generated English-like corpus.
The weights are random: the text it generates is nonsense, but every step of vLLM's pipeline
(tokenize, schedule, prefill, decode, detokenize, stream) runs for real.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

_WORDS = (
    "the a an of to in on for with by from at as is was are were be been has have had do does "
    "model token request server engine worker cache batch queue prompt answer question stream "
    "time fast slow small large first last next step layer head memory compute kernel thread "
    "process python torch tensor vector matrix weight value key attention decode prefill sample "
    "cat dog bird fish tree river mountain city road house garden window door table chair book "
    "red green blue yellow black white bright dark warm cold quiet loud happy sad old new young "
    "run walk read write think speak listen build break open close start stop wait move turn "
    "one two three four five six seven eight nine ten hundred thousand many few some all none "
    "today tomorrow yesterday morning evening night week month year always never often sometimes"
)
WORDS = _WORDS.split()

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def corpus(rng: random.Random, lines: int = 20000):
    for _ in range(lines):
        n = rng.randint(4, 20)
        words = [rng.choice(WORDS) for _ in range(n)]
        words[0] = words[0].capitalize()
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        yield " ".join(words) + rng.choice([".", ".", "?", "!", ","])


def build_tokenizer(out: Path, rng: random.Random, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    bos = tok.token_to_id("<s>")
    # every encoding starts with <s>, as a Llama tokenizer's does
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return fast


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", type=Path, help="folder to write the model and tokenizer into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=2000)
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    tok = build_tokenizer(args.out, rng, args.vocab_size)
    vocab = len(tok)
    config = LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=256,
        vocab_size=vocab,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(args.out), safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    ids = tok("The model reads a prompt.")["input_ids"]
    print(
        f"wrote {args.out}: vocab {vocab}, {params / 1e6:.2f} M parameters; "
        f"'The model reads a prompt.' -> {ids} -> {tok.decode(ids)!r}"
    )


if __name__ == "__main__":
    main()
