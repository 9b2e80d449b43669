"""Pure decisions over store records, shared by the loop and the agent: job lifecycle, discovery env, diagnosis, node health."""
