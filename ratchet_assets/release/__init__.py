"""Release control: the promotion/rollback policy, the versions registry and the release tick."""
