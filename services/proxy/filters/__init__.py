"""The proxy's handler-chain filters: authentication, priority and fairness, authorization."""
