"""A tiny ``llama`` GGUF model with random weights, written with the ``gguf`` package.

No weights can be downloaded here, and none are needed to test the *protocol* of a real
OpenAI-compatible server (llama-cpp-python's): 2 layers, width 64, a byte-level SentencePiece
vocabulary (``<unk>``, ``<s>``, ``</s>`` and the 256 ``<0xNN>`` byte tokens, type 6) and a chat
template; ~470 KB. Its verdicts are noise: tests assert the protocol, never accuracy.

Two heads, both random:

* ``head="json"``: the output layer is random, plus a lean towards the ``"`` byte so that a
  grammar-constrained string (``"reason": "…"``) closes within a few tokens instead of running
  to the end of the context under greedy decoding;
* ``head="yes_no"``: the vocabulary also has the words ``Yes`` and ``No`` (normal tokens); every
  embedding carries a constant first dimension that the output layer turns into a large
  negative logit for every token but those two, whose rows are random and opposite. So every
  reply is ``Yes`` or ``No``, the two share nearly all the probability, and how they share it
  depends (randomly) on the prompt — the shape of a MiniCheck model's answer, with real log
  probabilities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

__all__ = ["write_tiny_llama"]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def write_tiny_llama(
    path: Path, *, head: Literal["json", "yes_no"] = "json", seed: int = 0, n_ctx: int = 4096
) -> Path:
    """Write the model to ``path`` and return it."""
    import gguf  # the `llama` extra (make llama); imported here so collection never needs it

    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    if head == "yes_no":
        tokens += ["Yes", "No"]
        types += [gguf.TokenType.NORMAL] * 2
    n_vocab, n_embd, n_ff, n_layer, n_head = len(tokens), 64, 128, 2, 4

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"citemon-tiny-{head}")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weights(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    ones = np.ones(n_embd, dtype=np.float32)
    embd = weights(n_vocab, n_embd, scale=1.0)
    writer.add_tensor("output_norm.weight", ones)
    if head == "yes_no":
        embd[:, 0] = 10.0  # a constant direction the residual stream keeps
        out = np.zeros((n_vocab, n_embd), dtype=np.float32)
        out[:, 0] = -2.0  # … which pushes every token far down …
        out[n_vocab - 2, 1:] = weights(n_embd - 1, scale=0.3)  # … but Yes, …
        out[n_vocab - 1, 1:] = -out[n_vocab - 2, 1:]  # … and No, its opposite
        out[n_vocab - 2 :, 0] = 0.0
    else:
        out = weights(n_vocab, n_embd, scale=0.1)
        out[3 + ord('"')] += 0.2  # the `"` byte leans up: strings close soon
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output.weight", out)
    for i in range(n_layer):
        for name in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{i}.{name}.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weights(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
