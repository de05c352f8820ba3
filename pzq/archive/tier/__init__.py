"""The node's archive: the topic logs it appends to, and its parts of the loop."""
