"""Layer 7, registration: how lm-eval finds us (the plugin registration called by the start-up
hook, our metrics and aggregations as the harness registers them, its logs, the wrapped-task
class and the resolution of wrapped-task names)."""
