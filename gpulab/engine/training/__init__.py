"""Training the GPT: optim (AdamW, loss scaling, a step), checkpoint (save/load on any grid), loop (gpulab train)."""
