"""Size-aware job policies: the queue ladder, and the predictors that place jobs on it.

Importing the package registers its policies in `JOB_POLICIES` (`common/policies/job.py`),
whose registry imports it when first asked for a policy: every module here that registers one
is imported below (`tests/unit/test_policy_registries.py` checks that none is missing).
"""

from common.policies.jobs import fewest, lp_order, predictors, weighted  # noqa: F401
