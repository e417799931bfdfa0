"""Training the GPT: optim (AdamW, loss scaling, one step), checkpoint (save/load on any grid), loop (``gpulab train``)."""
