"""Kubernetes views shared by the loop, the agent and stacks/: Node objects and their capacity, the autoscaler placeholders, the pool taints."""
