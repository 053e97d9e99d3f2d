"""The ATen operators the tasks ban (``Task.ops``), blocked in the dispatcher while the
cases run (``runner/dispatch.py``). An operator this PyTorch lacks is skipped.

Every variant of scaled dot-product attention is one list: ``F.scaled_dot_product_attention``
decomposes into one of the backend ones, and each can be called directly
(``torch.ops.aten._scaled_dot_product_attention_math``); PyTorch's multi-head attention
and encoder layer end in fused operators of their own when they take their fast path.
"""

SDPA_OPS = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "_native_multi_head_attention",
    "_transformer_encoder_layer_fwd",
)
# F.cross_entropy, nn.CrossEntropyLoss and torch._C._nn.cross_entropy_loss all enter
# here (the task allows F.log_softmax and F.nll_loss: its notebook says so)
CROSS_ENTROPY_OPS = ("cross_entropy_loss",)
# the fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer
MHA_OPS = ("_native_multi_head_attention",)
ENCODER_OPS = ("_transformer_encoder_layer_fwd", "_transformer_decoder_only_layer_fwd")
