"""compat doctor --live: real ranks, a real allreduce and a real Trainer step, under a launcher, with a hard timeout."""
