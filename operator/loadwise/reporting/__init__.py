"""What the operator reports about its policies: their status conditions and figures, the
policy metrics, and the Reporter that writes them (above the scheduler: it reads its state)."""
