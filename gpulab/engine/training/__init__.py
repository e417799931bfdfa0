"""Training the GPT: config (TrainConfig, what a run is), loop (running one on every rank), report (its
summary), optim (AdamW, loss scaling, a step), zero1 (the distributed optimizer), checkpoint (save/load on
any grid)."""
