"""The serial GPT: the reference every parallel result is checked against.

config (``GPTConfig``), layers (forward/backward pairs written by hand),
model (the whole GPT: parameters, loss and gradients), corpus (the shipped
text, character tokenizer, batches), sample (text generation).
"""
