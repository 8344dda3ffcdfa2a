"""API Priority and Fairness: classify each request, then hold it in a fair queue until a seat is free."""
