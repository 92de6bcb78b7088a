"""loadwise: a load-aware secondary scheduler for Kubernetes."""
