"""Optional integrations with other libraries; each submodule imports its library on import.

- `kernel_dsl.integrations.transformers`: the library flash attention as a Hugging Face
  transformers attention implementation (`attn_implementation="kernel_dsl"`); `pip install
  "kernel-dsl[hf]"`.
"""
