"""Many runs: run specs, derived seeds, sweep folders and the executors that train them."""
