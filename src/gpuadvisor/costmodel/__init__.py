"""Cost model: analytical memory/compute/communication, rules from the seeds, learned correction."""
