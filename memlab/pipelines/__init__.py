"""Memory pipelines (see ``memlab.pipelines.base`` for the contract)."""
