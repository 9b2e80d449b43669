"""The API's services over the store: jobs, nodes, logs, usage, tokens, virtual clusters."""
