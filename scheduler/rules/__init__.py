"""Pure decisions over store records, shared by the loop and the agent.

lifecycle (job state machine, retries), discovery (the env a task is given), diagnosis
(failure rules), health (node health).
"""
