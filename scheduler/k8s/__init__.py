"""Kubernetes views used by the loop, the agent and stacks/ alike.

Node objects and their capacity, the autoscaler's placeholders, the pool taints.
"""
