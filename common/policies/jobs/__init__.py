"""Size-aware job policies: the queue ladder, and the predictors that place jobs on it."""
